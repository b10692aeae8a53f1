#pragma once
// For tests of bad inputs: the message of the canonlab::Error an action throws, and a containment check that
// prints the whole message when it fails.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <typeinfo>

#include "engine/error.h"

namespace canonlab::test_support {

// The message of the canonlab::Error that `action` throws; fails the test if it throws nothing or something else.
template <class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << typeid(e).name() << " instead of canonlab::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace canonlab::test_support

// `text` is evaluated once: it is often error_of(...), which runs the failing action again on each evaluation, or
// testing::internal::GetCapturedStderr(), which a second call crashes.
#define EXPECT_CONTAINS(text, part)                                            \
  do {                                                                         \
    const std::string contains_text_ = (text);                                 \
    EXPECT_NE(contains_text_.find(part), std::string::npos) << contains_text_; \
  } while (0)
