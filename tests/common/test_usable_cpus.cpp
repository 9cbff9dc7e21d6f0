// usable_cpus counts the CPUs the affinity mask allows (what taskset, a cpuset or a scheduler's
// binding leaves a process), not the machine's: narrowed to one CPU it says 1.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include "common/usable_cpus.hpp"

using namespace xtrain;

TEST_CASE("usable_cpus counts the affinity mask, not the machine", "[cpus]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  CHECK(usable_cpus() == static_cast<unsigned>(CPU_COUNT(&all)));
  CHECK(usable_cpus() <= static_cast<unsigned>(sysconf(_SC_NPROCESSORS_ONLN)));

  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);  // this thread only
  const unsigned narrowed = usable_cpus();
  REQUIRE(sched_setaffinity(0, sizeof(all), &all) == 0);
  CHECK(narrowed == 1);
}
