#include "sandbox/image_store.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/json.h"
#include "sandbox/oci_image.h"
#include "sandbox/oci_layout.h"
#include "sandbox/spec.h"
#include "sandbox/tree_cache.h"

namespace flashroll::sandbox {

namespace {

constexpr size_t kMaxNameLength = 64;

// Copies the tree `from` into the existing directory `to`, symlinks as
// symlinks; a FIFO, socket or device node fails the copy, naming it.
Status CopyTree(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  try {
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  } catch (const fs::filesystem_error& e) {
    return Status::IoError(std::string("copy ") + from + ": " + e.what());
  }
  return Status::Ok();
}

// Beside each unpacked tree of <store>/.oci: its image's exec defaults.
constexpr char kDefaultsSuffix[] = ".defaults.json";

// Written aside and renamed into place, so a reader sees all or nothing.
Status WriteDefaults(const std::string& path, const ImageDefaults& defaults) {
  const Json doc = {{"user", defaults.user}, {"group", defaults.group}, {"workdir", defaults.workdir}};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump() << "\n";
    if (!out.flush()) return Status::IoError("write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, "rename " + tmp);
  }
  return Status::Ok();
}

Result<ImageDefaults> ReadDefaults(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ImageDefaults{};  // a copied tree, or imported before defaults were kept
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto parse = [&]() -> Result<ImageDefaults> {
    FR_ASSIGN_OR_RETURN(Json root, ParseJson(text, path));
    const JsonView view(root, "");
    FR_RETURN_IF_ERROR(view.ExpectObject());
    ImageDefaults out;
    FR_ASSIGN_OR_RETURN(out.user, view.GetString("user", ""));
    FR_ASSIGN_OR_RETURN(out.group, view.GetString("group", ""));
    FR_ASSIGN_OR_RETURN(out.workdir, view.GetString("workdir", ""));
    FR_RETURN_IF_ERROR(CheckExecUser("user", out.user));
    FR_RETURN_IF_ERROR(CheckExecUser("group", out.group));
    FR_RETURN_IF_ERROR(CheckWorkdir("workdir", out.workdir));
    return out;
  };
  Result<ImageDefaults> defaults = parse();
  if (!defaults.ok()) return defaults.status().Wrap(path);
  return defaults;
}

}  // namespace

Status CheckImageName(const std::string& name) {
  const std::string what = "image name '" + name + "': ";
  if (name.empty() || name.size() > kMaxNameLength) {
    return Status::InvalidArgument(what + "must be 1.." + std::to_string(kMaxNameLength) + " characters");
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return Status::InvalidArgument(what + "may hold only letters, digits, '.', '_' and '-'");
    }
  }
  if (name[0] == '.' || name[0] == '-') return Status::InvalidArgument(what + "may not start with '.' or '-'");
  if (name == "host" || name == "busybox") return Status::InvalidArgument(what + "is a built-in image");
  return Status::Ok();
}

Status ImportImage(const std::string& store, const std::string& source, const std::string& name) {
  FR_RETURN_IF_ERROR(CheckImageName(name));
  SandboxSpec parsed;
  FR_RETURN_IF_ERROR(ParseImage(source, &parsed));
  if (parsed.image != ImageKind::kDirectory) {
    return Status::InvalidArgument("image '" + source + "': the built-in images need no import");
  }
  FR_RETURN_IF_ERROR(MakeDirs(store, 0755));
  const std::string entry = store + "/" + name;
  struct stat st {};
  if (::lstat(entry.c_str(), &st) == 0) {
    return Status::AlreadyExists("image '" + name + "' is already in the store " + store);
  }
  if (!IsOciLayout(parsed.image_dir)) {
    return EnsureTree(entry, [&](const std::string& tmp) { return CopyTree(parsed.image_dir, tmp); }).status();
  }
  OciImageOptions options;
  options.cache_dir = store + "/.oci";
  FR_ASSIGN_OR_RETURN(std::string tree, EnsureOciImage(parsed.image_dir, parsed.image_ref, options));
  FR_ASSIGN_OR_RETURN(ImageDefaults defaults, OciImageDefaults(parsed.image_dir, parsed.image_ref));
  FR_RETURN_IF_ERROR(WriteDefaults(tree + kDefaultsSuffix, defaults));
  const std::string target = ".oci/" + std::filesystem::path(tree).filename().string();
  if (::symlink(target.c_str(), entry.c_str()) != 0) return Status::FromErrno(errno, "symlink " + entry);
  return Status::Ok();
}

Result<std::string> StoredImage(const std::string& store, const std::string& name) {
  FR_RETURN_IF_ERROR(CheckImageName(name));
  const std::string entry = store + "/" + name;
  std::unique_ptr<char, decltype(&::free)> real_store(::realpath(store.c_str(), nullptr), &::free);
  std::unique_ptr<char, decltype(&::free)> real(::realpath(entry.c_str(), nullptr), &::free);
  if (real_store == nullptr || real == nullptr) {
    if (errno == ENOENT) {
      return Status::NotFound("no image '" + name + "' in the image store " + store +
                              " (flashroll image import DIR --name " + name + ")");
    }
    return Status::FromErrno(errno, "realpath " + entry);
  }
  const std::string tree = real.get();
  const std::string root = std::string(real_store.get()) + "/";
  // An entry is either a tree or a link into .oci; anything else was not
  // made by ImportImage.
  if (tree.compare(0, root.size(), root) != 0) {
    return Status::InvalidArgument("image '" + name + "': " + entry + " resolves to " + tree + ", outside the store");
  }
  struct stat st {};
  if (::stat(tree.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + tree);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("image '" + name + "': " + entry + " is not a directory");
  return tree;
}

Result<ImageDefaults> StoredImageDefaults(const std::string& store, const std::string& name) {
  FR_ASSIGN_OR_RETURN(std::string tree, StoredImage(store, name));
  // Only unpacked OCI trees have defaults; a copied tree's sibling could be
  // another image's entry ("tools" beside "tools.defaults.json").
  std::unique_ptr<char, decltype(&::free)> real_store(::realpath(store.c_str(), nullptr), &::free);
  if (real_store == nullptr) return Status::FromErrno(errno, "realpath " + store);
  if (!tree.starts_with(std::string(real_store.get()) + "/.oci/")) return ImageDefaults{};
  return ReadDefaults(tree + kDefaultsSuffix);
}

}  // namespace flashroll::sandbox
