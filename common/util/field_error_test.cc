#include "common/util/field_error.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(FieldError, TheFieldIsDataNotOnlyText) {
  const absl::Status st = FieldError("messages[2].role", "must be one of system, user");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "messages[2].role: must be one of system, user");
  EXPECT_EQ(ErrorField(st), "messages[2].role");
  const absl::Status copy = st;  // survives copies (and RETURN_IF_ERROR)
  EXPECT_EQ(ErrorField(copy), "messages[2].role");
  EXPECT_EQ(FieldError("model", "none such", absl::StatusCode::kNotFound).code(),
            absl::StatusCode::kNotFound);
}

TEST(FieldError, AMessageThatMerelyLooksLikeOneNamesNoField) {
  EXPECT_FALSE(ErrorField(absl::InvalidArgumentError("prompt: too long")).has_value());
  EXPECT_FALSE(ErrorField(absl::OkStatus()).has_value());
}

}  // namespace
}  // namespace tandem
