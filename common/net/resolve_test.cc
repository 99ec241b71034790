#include "common/net/resolve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ResolveTest, NumericHostsNeedNoLookup) {
  int lookups = 0;
  GetAddrInfoFn never = [&](const char*, const char*, const addrinfo*, addrinfo**) {
    ++lookups;
    return EAI_FAIL;
  };
  for (const char* host : {"127.0.0.1", "::1", "[::1]"}) {
    auto r = Resolve(host, "7071", absl::Now() + absl::Seconds(1), -1, false, never);
    ASSERT_TRUE(r.ok()) << host << ": " << r.status();
    ASSERT_NE(r->get(), nullptr);
  }
  auto v4 = Resolve("127.0.0.1", "7071", absl::InfinitePast(), -1, false, never);
  ASSERT_TRUE(v4.ok()) << v4.status();  // even past its deadline: no wait
  ASSERT_EQ((*v4)->ai_family, AF_INET);
  const auto* sin = reinterpret_cast<const sockaddr_in*>((*v4)->ai_addr);
  EXPECT_EQ(ntohs(sin->sin_port), 7071);
  EXPECT_EQ(ntohl(sin->sin_addr.s_addr), 0x7f000001u);
  EXPECT_EQ(lookups, 0);
}

TEST(ResolveTest, NameGoesThroughTheLookup) {
  GetAddrInfoFn fake = [](const char* h, const char* p, const addrinfo* hints, addrinfo** res) {
    EXPECT_STREQ(h, "peer-3.example");
    return getaddrinfo("127.0.0.1", p, hints, res);
  };
  auto r = Resolve("peer-3.example", "99", absl::Now() + absl::Seconds(10), -1, false, fake);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>((*r)->ai_addr)->sin_port), 99);

  GetAddrInfoFn nx = [](const char*, const char*, const addrinfo*, addrinfo**) {
    return EAI_NONAME;
  };
  auto bad = Resolve("nowhere.example", "99", absl::Now() + absl::Seconds(10), -1, false, nx);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("nowhere.example"), std::string::npos)
      << bad.status();
}

// A resolver that never answers in time: the call returns at its deadline
// (not when the lookup ends), and the lookup's late answer is freed.
TEST(ResolveTest, HungLookupReturnsAtTheDeadline) {
  auto release = std::make_shared<absl::Notification>();
  GetAddrInfoFn hung = [release](const char*, const char* p, const addrinfo* hints,
                                 addrinfo** res) {
    release->WaitForNotificationWithTimeout(absl::Seconds(30));
    return getaddrinfo("127.0.0.1", p, hints, res);
  };
  const absl::Time start = absl::Now();
  auto r = Resolve("slow.example", "1", start + absl::Milliseconds(300), -1, false, hung);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find("slow.example"), std::string::npos) << r.status();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(2));
  release->Notify();
}

TEST(ResolveTest, WakeFdCancelsTheWait) {
  auto release = std::make_shared<absl::Notification>();
  GetAddrInfoFn hung = [release](const char*, const char*, const addrinfo*, addrinfo**) {
    release->WaitForNotificationWithTimeout(absl::Seconds(30));
    return EAI_AGAIN;
  };
  const int wake = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(wake, 0);
  std::thread waker([wake] {
    absl::SleepFor(absl::Milliseconds(100));  // the wait must already be under way
    const uint64_t one = 1;
    (void)!write(wake, &one, sizeof(one));
  });
  const absl::Time start = absl::Now();
  auto r = Resolve("slow.example", "1", start + absl::Seconds(20), wake, false, hung);
  waker.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  release->Notify();
  close(wake);
}

}  // namespace
}  // namespace lockstep
