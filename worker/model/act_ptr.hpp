// Typed pointers to activations. Every activation tensor (B,T,·) is stored in the backend's
// activation dtype, a run-time property of the backend: fp32, or bf16 on a GPU in mixed
// precision. GPT and the Backend interface pass activations as ActPtr / ConstActPtr (an address
// and its dtype), so one interface serves both without void* and without a virtual per dtype:
//   - offsets count elements of the pointer's dtype (p + n);
//   - as<T>() hands out the typed address and throws std::logic_error when T is not the stored
//     dtype (a backend that reads bf16 memory as float fails loudly, never silently).
// A float* converts implicitly (an fp32 activation), and a backend's own storage types convert
// the same way once they have a DTypeOf (the CUDA backend adds __nv_bfloat16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace xtrain {

enum class DType : std::uint8_t { f32, bf16 };

constexpr size_t dtype_bytes(DType t) { return t == DType::bf16 ? 2 : 4; }
constexpr const char* dtype_name(DType t) { return t == DType::bf16 ? "bf16" : "fp32"; }

// The DType of a C++ storage type.
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};

template <class Void>
class BasicActPtr {
  static_assert(std::is_same_v<Void, void> || std::is_same_v<Void, const void>);
  static constexpr bool kConst = std::is_const_v<Void>;
  using Byte = std::conditional_t<kConst, const char, char>;

 public:
  BasicActPtr() = default;
  BasicActPtr(std::nullptr_t) {}
  BasicActPtr(Void* data, DType dtype) : data_(data), dtype_(dtype) {}
  // From a typed address (float*, or a backend's storage type), const-correctly.
  template <class T, class = std::enable_if_t<std::is_convertible_v<T*, Void*>>,
            class = decltype(DTypeOf<std::remove_const_t<T>>::value)>
  BasicActPtr(T* p) : data_(p), dtype_(DTypeOf<std::remove_const_t<T>>::value) {}
  // ActPtr -> ConstActPtr.
  template <class Other, class = std::enable_if_t<kConst && std::is_same_v<Other, void>>>
  BasicActPtr(const BasicActPtr<Other>& p) : data_(p.data()), dtype_(p.dtype()) {}

  Void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  explicit operator bool() const { return data_ != nullptr; }

  // n elements further on.
  BasicActPtr operator+(size_t n) const {
    return {static_cast<Void*>(static_cast<Byte*>(data_) + n * dtype_bytes(dtype_)), dtype_};
  }

  // The address as T*; throws std::logic_error when the memory does not hold T.
  template <class T>
  std::conditional_t<kConst, const T*, T*> as() const {
    if (data_ != nullptr && dtype_ != DTypeOf<T>::value) {
      throw std::logic_error(std::string("activation memory holds ") + dtype_name(dtype_) + ", read as " +
                             dtype_name(DTypeOf<T>::value));
    }
    return static_cast<std::conditional_t<kConst, const T*, T*>>(data_);
  }

 private:
  Void* data_ = nullptr;
  DType dtype_ = DType::f32;
};

using ActPtr = BasicActPtr<void>;
using ConstActPtr = BasicActPtr<const void>;

}  // namespace xtrain
