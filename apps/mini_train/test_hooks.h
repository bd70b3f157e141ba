// The test hooks of mini_train, in one place: environment variables that make a worker fail in a
// chosen way at a chosen point, as a crashed or killed worker would, so that the launcher's and the
// resume's handling of it can be tested end to end. Not options: nothing but the tests should set
// them, and a run without them pays one getenv per epoch and one cached pointer test per step.
//
//   MT_TEST_FAIL_RANK=r MT_TEST_FAIL_EPOCH=e   rank r exits with code 3 at the start of epoch e
//                                              (tests/apps/mini_train_test.sh, case nproc_failure)
//   MT_TEST_ERROR_RANK=r MT_TEST_ERROR_EPOCH=e rank r throws an error at the start of epoch e, which
//                                              unwinds as a real one (a full disk) does
//                                              (tests/distributed_launcher/first_failure.sh)
//   MT_TEST_KILL_STEP=s [MT_TEST_KILL_RANK=r]  rank r (default 0) sends itself SIGKILL right after
//                                              global step s (after any checkpoint of that step),
//                                              in a run that did not resume (mini_train_test.sh
//                                              step_resume, tests/distributed_launcher/restart.sh)
//   MT_TEST_STOP_RANK=r MT_TEST_STOP_PHASE=p   rank r stops itself (SIGSTOP) in phase p: init (before
//                                              it meets the others, who wait in MPI_Init or the
//                                              rendezvous) or finalize (after its work, before
//                                              MPI_Finalize); finalize-hang: rank r sleeps there for
//                                              ever, beating (tests/distributed_launcher/stopped_phase.sh)
#pragma once

#include <cstdint>

#include "distributed/fault/heartbeat.h"

namespace mt::app {

// At the start of each epoch of a data-parallel run.
void test_fail_hook(int rank, int64_t epoch);
// After each step.
void test_kill_hook(int rank, int64_t step, bool resumed);
// On entering init and finalize (main.cpp).
void test_stop_hook(int rank, dist::Phase phase);

}  // namespace mt::app
