#include "launcher/process/rank_process.hpp"

// Boost 1.74's asio needs <utility> before it in C++20 mode (std::exchange).
#include <utility>

// Boost.Process 1.74 compiles its vfork path only for pre-2008 POSIX feature levels; glibc's
// vfork is fine. vfork copies no page tables: 8 ranks started about 30% faster than with fork.
#define BOOST_POSIX_HAS_VFORK 1

#include <csignal>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/process/args.hpp>
#include <boost/process/async.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/error.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <boost/process/posix.hpp>

#include "common/exit_codes.hpp"

namespace bp = boost::process;

namespace xtrain::launcher {
namespace {

// Writes "xlaunch: <what>: <errno text>\n" to the rank's output. Async-signal-safe.
void report(const char* what, int error) {
  for (const char* part : {"xlaunch: ", what, ": ", strerrordesc_np(error), "\n"}) {
    if (part) (void)!::write(STDERR_FILENO, part, std::strlen(part));
  }
}

// vfork: xlaunch's thread resumes once the child has exec'd or exited, so its process group
// exists before any killpg. Boost's exec-error pipe is off (ignore_error): a failure after
// vfork is the rank's own exit code, the way a shell reports it: 125 could not set the rank up,
// 126 cannot execute, 127 not found; the reason goes to the rank's log and the root cause.
struct RankSetup : bp::extend::handler {
  pid_t parent = 0;
  int output_fd = -1;
  const char* exe = nullptr;
  mutable std::error_code fork_error;

  // In the child between vfork and exec, on xlaunch's memory: system calls only. Every signal
  // is blocked (see SignalsBlocked): restore the default handlers before unblocking, so that a
  // signal meant for the rank never runs xlaunch's handlers, and ignored ones do not survive exec.
  template <class Executor>
  void on_exec_setup(Executor&) const {
    if (::setpgid(0, 0) != 0) fail("setpgid");
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl(PR_SET_PDEATHSIG)");
    if (::getppid() != parent) ::_exit(exit_code::kLaunchFailure);  // xlaunch died before PDEATHSIG was armed
    if (::dup2(output_fd, STDOUT_FILENO) < 0 || ::dup2(output_fd, STDERR_FILENO) < 0) fail("dup2");
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }

  template <class Executor>
  void on_exec_error(Executor&, const std::error_code& error) const {
    report(exe, error.value());
    ::_exit(error.value() == ENOENT || error.value() == ENOTDIR ? exit_code::kNotFound : exit_code::kNotExecutable);
  }

  template <class Executor>
  void on_fork_error(Executor&, const std::error_code& error) const {
    fork_error = error;
  }

  [[noreturn]] static void fail(const char* what) {
    report(what, errno);
    ::_exit(exit_code::kLaunchFailure);
  }
};

// Blocks every signal of the calling thread while it lives: see RankSetup::on_exec_setup.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

bp::environment to_boost_env(const std::map<std::string, std::string>& env) {
  bp::environment out;
  for (const auto& [name, value] : env) out[name] = value;
  return out;
}

}  // namespace

ExitStatus exit_status_from_wait(int wait_status) {
  if (WIFSIGNALED(wait_status)) return {0, WTERMSIG(wait_status)};
  return {WEXITSTATUS(wait_status), 0};
}

// Shared with Boost's exit handler, which may fire after ~RankProcess: then on_exit is empty.
struct RankProcess::Impl {
  bp::child child;
  std::function<void(ExitStatus)> on_exit;
};

RankProcess::RankProcess(boost::asio::io_context& io, const SpawnRequest& request,
                         std::function<void(ExitStatus)> on_exit)
    : impl_(std::make_shared<Impl>()) {
  impl_->on_exit = std::move(on_exit);
  RankSetup setup;
  setup.parent = ::getpid();
  setup.output_fd = request.output_fd;
  setup.exe = request.argv.front().c_str();
  const std::weak_ptr<Impl> weak = impl_;
  // Boost calls this from inside its SIGCHLD loop; post so that our handler may spawn again.
  auto exited = [&io, weak](int, const std::error_code&) {
    boost::asio::post(io, [weak] {
      const auto impl = weak.lock();
      if (!impl || !impl->on_exit) return;
      auto callback = std::move(impl->on_exit);
      callback(exit_status_from_wait(impl->child.native_exit_code()));
    });
  };
  {
    const SignalsBlocked blocked;
    impl_->child = bp::child(bp::exe = request.argv.front(),
                             bp::args = std::vector<std::string>(request.argv.begin() + 1, request.argv.end()),
                             bp::env = to_boost_env(request.env), bp::std_in < bp::null, setup, io,
                             bp::on_exit = exited, bp::ignore_error, bp::posix::use_vfork);
  }
  if (!impl_->child.valid()) {
    const int error = setup.fork_error ? setup.fork_error.value() : EAGAIN;
    throw std::runtime_error(std::string("vfork failed: ") + strerrordesc_np(error));
  }
  pid_ = impl_->child.id();
}

RankProcess::~RankProcess() {
  impl_->on_exit = nullptr;
  impl_->child.detach();  // the supervisor kills and reaps; ~child must not SIGKILL a pid it may not own
}

}  // namespace xtrain::launcher
