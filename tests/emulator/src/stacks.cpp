/// \file
/// Guarded fiber stacks: each is mmap'ed below a PROT_NONE guard page, so an overflow faults
/// instead of corrupting its neighbour, and a SIGSEGV handler on an alternate signal stack
/// names the cause. 64 KiB each unless ATTN_EMU_STACK_KIB says otherwise; kept per OS thread.

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "internal.hpp"

namespace attn_emulator::detail {

namespace {

std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

std::size_t stack_bytes() {
  static const std::size_t bytes = [] {
    const char* kib = std::getenv("ATTN_EMU_STACK_KIB");
    const std::size_t n = kib && *kib ? std::strtoul(kib, nullptr, 10) : 64;
    if (n < 16) fail("ATTN_EMU_STACK_KIB=%s: give at least 16 (KiB)", kib);
    return (n * 1024 + page_size() - 1) / page_size() * page_size();
  }();
  return bytes;
}

// Guard pages of every stack, read by the signal handler (grows only between launches).
constexpr std::size_t max_guards = 1 << 16;
const char* guards[max_guards];
std::size_t guard_count = 0;
struct sigaction previous_handler;

void on_segv(int signal, siginfo_t* info, void* context) {
  const char* address = static_cast<const char*>(info->si_addr);
  const std::size_t page = page_size();
  for (std::size_t i = 0; i < guard_count; ++i) {
    if (address >= guards[i] && address < guards[i] + page) {
      static const char message[] =
          "attn_emulator: fiber stack overflow (a CUDA thread used more than its stack; set "
          "ATTN_EMU_STACK_KIB to give more)\n";
      (void)!write(STDERR_FILENO, message, sizeof message - 1);
      std::abort();
    }
  }
  // Not ours: hand over to whoever handled SIGSEGV before, or fault again by default.
  if ((previous_handler.sa_flags & SA_SIGINFO) && previous_handler.sa_sigaction) {
    previous_handler.sa_sigaction(signal, info, context);
  } else if (previous_handler.sa_handler != SIG_DFL && previous_handler.sa_handler != SIG_IGN) {
    previous_handler.sa_handler(signal);
  } else {
    sigaction(SIGSEGV, &previous_handler, nullptr);
  }
}

void install_handler() {
  thread_local std::unique_ptr<char[]> alternate;
  if (!alternate) {
    constexpr std::size_t bytes = 64 * 1024;
    alternate = std::make_unique<char[]>(bytes);
    stack_t stack{};
    stack.ss_sp = alternate.get();
    stack.ss_size = bytes;
    sigaltstack(&stack, nullptr);
  }
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGSEGV, &action, &previous_handler) == 0;
  }();
  (void)installed;
}

struct stack_pool {
  std::vector<boost::context::stack_context> stacks;
  ~stack_pool() {
    for (auto& s : stacks)
      munmap(static_cast<char*>(s.sp) - s.size - page_size(), s.size + page_size());
  }
};

}  // namespace

boost::context::stack_context fiber_stack(std::size_t i) {
  thread_local stack_pool pool;
  install_handler();
  while (pool.stacks.size() <= i) {
    const std::size_t page = page_size(), bytes = stack_bytes();
    void* base = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED || mprotect(base, page, PROT_NONE) != 0 || guard_count == max_guards)
      fail("cannot map a %zu KiB fiber stack", bytes / 1024);
    guards[guard_count++] = static_cast<const char*>(base);
    boost::context::stack_context s;
    s.size = bytes;
    s.sp = static_cast<char*>(base) + page + bytes;  // stacks grow down from the top
    pool.stacks.push_back(s);
  }
  return pool.stacks[i];
}

}  // namespace attn_emulator::detail
