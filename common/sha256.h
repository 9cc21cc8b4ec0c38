// Sha256: the SHA-256 of a stream of bytes (OpenSSL's EVP), used to check
// OCI image blobs against the digests that name them and checkpoint tensors
// against their manifest.
//
// Thread safety: an object is not synchronised; use one per stream.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

struct evp_md_ctx_st;

namespace flashroll {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  // The digest of everything passed to Update, as 64 lowercase hex digits.
  // Call once. kInternal when OpenSSL could not compute it.
  Result<std::string> HexDigest();

 private:
  struct FreeCtx {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, FreeCtx> ctx_;
  bool ok_ = false;  // false once any OpenSSL call failed
};

// True if `hex` is 64 lowercase hex digits, the form a sha256 digest takes.
bool IsSha256Hex(const std::string& hex);

}  // namespace flashroll
