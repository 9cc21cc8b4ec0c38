// HttpServer over TLS and HttpClient trusting a given certificate
// (common/http.h), with a self-signed certificate made by the openssl CLI.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/http.h"

namespace flashroll {
namespace {

namespace fs = std::filesystem;

// A self-signed certificate for 127.0.0.1 and its key, in a temporary
// directory removed at the end.
class TlsFiles {
 public:
  TlsFiles() {
    char dir[] = "/tmp/flashroll-tls-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    ok_ = MakeCert(cert(), key()) && MakeCert(dir_ + "/other.pem", dir_ + "/other.key");
  }
  ~TlsFiles() { fs::remove_all(dir_); }

  bool ok() const { return ok_; }
  std::string cert() const { return dir_ + "/cert.pem"; }
  std::string key() const { return dir_ + "/key.pem"; }
  // A second certificate whose key does not match cert().
  std::string other_key() const { return dir_ + "/other.key"; }
  const std::string& dir() const { return dir_; }

 private:
  static bool MakeCert(const std::string& cert, const std::string& key) {
    const std::string command =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
        key + " -out " + cert + " 2>/dev/null";
    return std::system(command.c_str()) == 0;
  }

  std::string dir_;
  bool ok_ = false;
};

HttpServerOptions TlsOptions(const TlsFiles& files) {
  HttpServerOptions options;
  options.bearer_token = "tls-token";
  options.tls_cert_file = files.cert();
  options.tls_key_file = files.key();
  return options;
}

Result<HttpClient> Client(const std::string& url, const std::string& ca) {
  HttpClientOptions options;
  options.base_url = url;
  options.bearer_token = "tls-token";
  options.ca_cert_file = ca;
  return HttpClient::Create(options);
}

TEST(HttpTlsTest, ServesHttpsToAClientThatTrustsTheCertificate) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "openssl req failed";
  HttpServer server(TlsOptions(files));
  server.HandleJson(HttpMethod::kGet, "/hello", [](const HttpRequest&) -> Result<Json> {
    return Json{{"hello", "tls"}};
  });
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.base_url().rfind("https://127.0.0.1:", 0), 0u) << server.base_url();

  auto trusting = Client(server.base_url(), files.cert());
  ASSERT_TRUE(trusting.ok());
  auto reply = trusting->GetJson("/hello");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)["hello"], "tls");

  // The system's CA store does not vouch for a self-signed certificate.
  auto untrusting = Client(server.base_url(), "");
  ASSERT_TRUE(untrusting.ok());
  EXPECT_EQ(untrusting->GetJson("/hello").status().code(), Code::kUnavailable);

  // Plain HTTP to the TLS port gets no reply.
  std::string plain_url = server.base_url();
  plain_url.replace(0, 5, "http");
  auto plain = Client(plain_url, "");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->GetJson("/hello").ok());
  server.Stop();
}

TEST(HttpTlsTest, FilesThatDoNotLoadFailStartNamingThem) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "openssl req failed";
  HttpServerOptions options = TlsOptions(files);
  options.tls_cert_file = files.dir() + "/missing.pem";
  Status status = HttpServer(options).Start();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("TLS certificate " + files.dir() + "/missing.pem"), std::string::npos)
      << status.ToString();

  options = TlsOptions(files);
  options.tls_key_file = files.other_key();
  status = HttpServer(options).Start();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("TLS key " + files.other_key() + ": "), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("key values mismatch"), std::string::npos) << status.ToString();

  options = TlsOptions(files);
  options.tls_key_file.clear();
  status = HttpServer(options).Start();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("both a certificate and a key"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace flashroll
