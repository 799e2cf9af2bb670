#include "tessel/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "tessel/core/error.h"

namespace tessel {

FileBytes FileBytes::map(const std::string& path) {
  FileBytes f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  TESSEL_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  f.size_ = st.st_size;
  if (f.size_ > 0) {  // mmap of zero bytes fails; an empty file is simply no bytes
    void* p = ::mmap(nullptr, static_cast<size_t>(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    TESSEL_CHECK(p != MAP_FAILED, "{}: cannot map ({})", path, std::strerror(mmap_errno));
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  } else {
    ::close(fd);
  }
  return f;
}

FileBytes FileBytes::own(std::string name, std::string bytes) {
  FileBytes f;
  f.path_ = std::move(name);
  f.owned_ = std::move(bytes);
  f.data_ = reinterpret_cast<const uint8_t*>(f.owned_.data());
  f.size_ = static_cast<int64_t>(f.owned_.size());
  return f;
}

FileBytes::~FileBytes() { release(); }

void FileBytes::release() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  mapped_ = other.mapped_;
  size_ = other.size_;
  if (mapped_) {
    data_ = other.data_;
  } else {
    owned_ = std::move(other.owned_);
    data_ = reinterpret_cast<const uint8_t*>(owned_.data());
  }
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_ = false;
  return *this;
}

}  // namespace tessel
