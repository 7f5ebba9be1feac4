// A gtest fixture owning one kvpoold in a fresh data directory: stopped in TearDown, which
// fails the test on an unclean exit or a sanitizer report in its log, and removes the
// directory. Subclasses start it (daemon_->Start) with the flags they need.
#ifndef KVPOOL_TESTING_DAEMON_TEST_H_
#define KVPOOL_TESTING_DAEMON_TEST_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "daemon.h"

namespace kvpool::testing {

class DaemonTest : public ::testing::Test {
 protected:
  explicit DaemonTest(std::string prefix = "kvpoold-test") : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = MakeTempDir(prefix_);
    daemon_ = std::make_unique<Daemon>(dir_);
  }
  void TearDown() override {
    int rc = daemon_->Stop();  // a clean exit, and nothing a sanitizer build complained of
    if (rc != -1) EXPECT_EQ(rc, 0) << daemon_->output();
    std::string log = daemon_->output();
    EXPECT_EQ(log.find("Sanitizer"), std::string::npos) << log;
    EXPECT_EQ(log.find("runtime error"), std::string::npos) << log;
    daemon_.reset();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  std::string prefix_, dir_;
  std::unique_ptr<Daemon> daemon_;
};

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_DAEMON_TEST_H_
