// The image store: images a node serves by name (`flashroll image import`,
// the `images` of a sandboxd config), kept in one directory the node owns.
//
//   <store>/<name>          a directory imported as it is: a copy, so later
//                           changes to the source do not reach the image
//   <store>/<name> -> .oci/<digest>
//                           an OCI image layout: its layers unpacked once
//                           (oci_image.h), the name a relative symlink, so
//                           names of the same image share one tree
//   <store>/.oci/<digest>.defaults.json
//                           the image config's User and WorkingDir
//                           (ReadOciImageDefaults), read at import
//
// A name is 1..64 of [A-Za-z0-9._-], not starting with '.' or '-'; host and
// busybox are the built-in images and cannot be imported.
//
// Thread safety: the functions may be called from any thread and process;
// an import is built aside and appears whole (tree_cache.h).
#pragma once

#include <string>

#include "common/status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// Where `flashroll image import` and sandboxd keep named images by default.
inline constexpr char kImageStoreDir[] = "/var/lib/flashroll/image-store";

// kInvalidArgument naming the rule a name breaks.
Status CheckImageName(const std::string& name);

// Imports `source` ("DIR" or "DIR:REF" for the image REF of an OCI layout,
// as ParseImage reads it) into `store` as `name`. Errors: those of
// CheckImageName and ParseImage; kAlreadyExists when the store holds the
// name; the unpack's or copy's error naming the file. Nothing is left of a
// failed import.
Status ImportImage(const std::string& store, const std::string& source, const std::string& name);

// The absolute tree of image `name` in `store`, resolved through its
// symlink. kNotFound when the store has no such image; kInvalidArgument
// for a bad name or an entry that resolves outside the store.
Result<std::string> StoredImage(const std::string& store, const std::string& name);

// The exec defaults of image `name` in `store`: an OCI image's config User
// and WorkingDir as kept at import; none for a copied directory (or an OCI
// image imported before they were kept). Errors: those of StoredImage, and
// kInvalidArgument naming the file for a defaults file that does not parse.
Result<ImageDefaults> StoredImageDefaults(const std::string& store, const std::string& name);

}  // namespace flashroll::sandbox
