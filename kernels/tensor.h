// Buffer and Tensor: memory a Backend owns, and typed views into it.
//
// A Buffer is one allocation made by a backend for one purpose (weights, KV,
// activations, pinned staging). Its address() is the backend's address of byte 0:
// on a device (and on the CPU fence backend) the host must never dereference it —
// only the backend that made the buffer may, through its ops and copies. A Tensor is
// a plain view: buffer + byte offset + element type + a [rows][cols] shape, rows
// contiguous. Views never own; the buffer must outlive them.
//
// Buffers are freed by their destructor (on the thread that owns the backend).
#ifndef TANDEM_KERNELS_TENSOR_H_
#define TANDEM_KERNELS_TENSOR_H_

#include <cstdint>

#include "common/model/ggml_type.h"

namespace tandem::kernels {

enum class MemoryKind { kWeights, kKv, kActivations, kStaging };

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // The backend's address of byte 0 (not host-dereferenceable in general).
  void* address() const { return address_; }
  int64_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }

 protected:
  Buffer(void* address, int64_t bytes, MemoryKind kind)
      : address_(address), bytes_(bytes), kind_(kind) {}

 private:
  void* const address_;
  const int64_t bytes_;
  const MemoryKind kind_;
};

struct Tensor {
  const Buffer* buffer = nullptr;
  int64_t offset = 0;  // bytes from the buffer's start
  model::GgmlType type = model::GgmlType::kF32;
  int64_t rows = 0;  // [rows][cols], row-major, rows contiguous
  int64_t cols = 0;  // a multiple of the type's block size

  bool empty() const { return buffer == nullptr; }
  int64_t RowBytes() const {
    const model::GgmlTypeTraits& t = model::Traits(type);
    return cols / t.block_size * t.type_size;
  }
  int64_t bytes() const { return rows * RowBytes(); }
  int64_t elements() const { return rows * cols; }
  // Rows [first, first + n) of this view.
  Tensor Rows(int64_t first, int64_t n) const {
    Tensor t = *this;
    t.offset += first * RowBytes();
    t.rows = n;
    return t;
  }
};

}  // namespace tandem::kernels

#endif  // TANDEM_KERNELS_TENSOR_H_
