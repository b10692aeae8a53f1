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

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)
