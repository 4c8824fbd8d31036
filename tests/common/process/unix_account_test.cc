// LookUpUnixAccount and LookUpGroupId (common/process/unix_account.h): the
// passwd and group databases read with the reentrant calls.
#include "common/process/unix_account.h"

#include <unistd.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(UnixAccountTest, RootHasUidZeroAndItsPrimaryGroupAmongItsGroups) {
  absl::StatusOr<UnixAccount> root = LookUpUnixAccount("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->name, "root");
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->gid, 0u);
  EXPECT_FALSE(root->home.empty());
  EXPECT_TRUE(root->InGroup(root->gid));
  bool listed = false;
  for (gid_t g : root->groups) listed = listed || g == root->gid;
  EXPECT_TRUE(listed) << "getgrouplist leaves out the primary group";
}

TEST(UnixAccountTest, UnknownAccountIsNotFound) {
  EXPECT_EQ(LookUpUnixAccount("no-such-user-tessera").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(UnixAccountTest, InGroupKnowsThePrimaryAndTheSupplementaryGroups) {
  const UnixAccount account{"alice", 1001, 1001, {1001, 27, 44}, "/home/alice"};
  EXPECT_TRUE(account.InGroup(1001));
  EXPECT_TRUE(account.InGroup(44));
  EXPECT_FALSE(account.InGroup(0));
  const UnixAccount primary_only{"bob", 1002, 1002, {}, "/"};
  EXPECT_TRUE(primary_only.InGroup(1002));
}

TEST(UnixAccountTest, GroupIdOfRootIsZeroAndUnknownGroupIsNotFound) {
  absl::StatusOr<gid_t> root = LookUpGroupId("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, 0u);
  EXPECT_EQ(LookUpGroupId("no-such-group-tessera").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(UnixAccountTest, LookUpsFromManyThreadsAtOnceAgree) {
  // The coordinator asks from its RPC threads at once (the admin group check).
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<UnixAccount> root = LookUpUnixAccount("root");
        absl::StatusOr<gid_t> group = LookUpGroupId("root");
        if (!root.ok() || root->uid != 0 || root->name != "root" || !group.ok() ||
            *group != 0) {
          ++wrong[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace tessera
