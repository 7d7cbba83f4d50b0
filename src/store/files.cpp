#include "store/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "diskformer/store/store.h"

namespace df::store::detail {

std::string errno_text(int e) { return std::strerror(e); }

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{dir + ": cannot open directory to sync it: " + errno_text(errno)};
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory (EINVAL); their renames are as durable as they get.
  if (rc != 0 && e != EINVAL) return Error{dir + ": fsync of the directory failed: " + errno_text(e)};
  return {};
}

std::string open_error(const std::string& path, const char* doing, int e) {
  if (e == ELOOP)
    return path + ": is a symbolic link; a store's files are never followed (remove the link, or use another " +
           "directory)";
  return path + ": cannot " + doing + ": " + errno_text(e);
}

Status refuse_links(const std::string& dir) {
  std::vector<std::string> names{kManifestFile, kHeaderFile, kDataFile, kProgressFile, kLockFile};
  // A split source's further headers (header-0000K.gguf).
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("header-") && n.ends_with(".gguf")) names.push_back(n);
  }
  for (const std::string& name : names) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) return Error{open_error(path, "", ELOOP)};
    if (!S_ISREG(st.st_mode)) return Error{path + ": is not a regular file; refusing to use " + dir + " as a store"};
  }
  return {};
}

Status write_file_durably(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  // A leftover (or planted) temporary goes first; O_EXCL then creates our own file, never opening someone's.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return Error{tmp + ": cannot remove: " + errno_text(errno)};
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Error{open_error(tmp, "create", errno)};
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Error{tmp + ": write of " + std::to_string(contents.size()) + " bytes failed at byte " +
                   std::to_string(done) + ": " + errno_text(e)};
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Error{tmp + ": fsync failed: " + errno_text(e)};
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return Error{path + ": cannot rename " + tmp + " into place: " + errno_text(e)};
  }
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

Status remove_durably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return {};
    return Error{path + ": cannot remove: " + errno_text(errno)};
  }
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

Result<std::string> read_whole_file(const std::string& path, bool* missing) {
  if (missing) *missing = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (missing) *missing = errno == ENOENT;
    return Error{open_error(path, "open", errno)};
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return Error{path + ": read failed at byte " + std::to_string(out.size()) + ": " + errno_text(e)};
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace df::store::detail
