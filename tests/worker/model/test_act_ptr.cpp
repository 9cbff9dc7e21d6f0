// The typed activation pointer: element offsets per dtype, const-correct conversions, and
// access that refuses to read memory as the wrong type.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "worker/model/act_ptr.hpp"

using namespace xtrain;

TEST_CASE("an activation pointer counts offsets in elements of its dtype", "[act_ptr]") {
  float f[8] = {};
  const ActPtr p = f;
  CHECK(p.dtype() == DType::f32);
  CHECK((p + 3).as<float>() == f + 3);

  std::uint16_t halves[8] = {};
  const ActPtr h(halves, DType::bf16);
  CHECK(static_cast<char*>((h + 3).data()) == reinterpret_cast<char*>(halves) + 6);
  CHECK((h + 3).dtype() == DType::bf16);
}

TEST_CASE("reading an activation as the wrong type throws", "[act_ptr]") {
  std::uint16_t halves[4] = {};
  const ConstActPtr h(halves, DType::bf16);
  CHECK_THROWS_AS(h.as<float>(), std::logic_error);
  CHECK_THROWS_WITH(h.as<float>(), "activation memory holds bf16, read as fp32");
  const ConstActPtr null = nullptr;
  CHECK(!null);
  CHECK(null.as<float>() == nullptr);
}

TEST_CASE("constness carries through the conversions", "[act_ptr]") {
  float f[2] = {1.0f, 2.0f};
  const ActPtr p = f;
  const ConstActPtr c = p;  // ActPtr -> ConstActPtr
  CHECK(c.as<float>()[1] == 2.0f);
  const float* cf = f;
  const ConstActPtr from_const = cf;
  CHECK(from_const.data() == f);
  static_assert(!std::is_convertible_v<const float*, ActPtr>, "a const float* must not become a mutable activation");
  static_assert(!std::is_convertible_v<ConstActPtr, ActPtr>, "no const_cast through the conversions");
  static_assert(std::is_same_v<decltype(c.as<float>()), const float*>);
}
