// Termination signals for long-running processes: block SIGINT/SIGTERM in every
// thread (call first thing in main, before any thread starts), then wait for one in
// the main thread.
#ifndef TANDEM_COMMON_UTIL_SIGNALS_H_
#define TANDEM_COMMON_UTIL_SIGNALS_H_

#include <pthread.h>
#include <signal.h>

namespace tandem {

inline sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

inline void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Returns the signal received.
inline int WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace tandem

#endif  // TANDEM_COMMON_UTIL_SIGNALS_H_
