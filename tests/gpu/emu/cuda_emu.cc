/*
 * cuda_emu.cc - the CUDA emulator's runtime (cuda_emu.h): host memory
 * behind the runtime API, and thread blocks run as fibers.
 *
 * A launch runs its blocks one after the other in a shuffled order; a block
 * is one fiber (a stack of its own with a guard page) per CUDA thread,
 * scheduled cooperatively on the calling host thread: a fiber runs
 * until it waits at a barrier or ends, then a random ready fiber runs. The
 * last fiber to reach a barrier releases the others and runs on.
 */
#include "cuda_emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GT_EMU_ASAN 1
#endif

namespace {

// ---- errors ----------------------------------------------------------------------------------

std::mutex g_lock; /* one launch or runtime call at a time */
cudaError_t g_sticky = cudaSuccess; /* the last error, for cudaGetLastError */

cudaError_t fail(cudaError_t err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t fail(cudaError_t err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda-emu: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  g_sticky = err;
  return err;
}

// ---- device memory: every allocation tracked -----------------------------------------------

struct Alloc {
  size_t bytes;
  bool device; /* else pinned host */
};
std::map<uintptr_t, Alloc> g_allocs;
size_t g_device_bytes = 0;
const size_t kDeviceMemory = (size_t)16 << 30; /* what the emulated device reports */

/* The allocation holding [p, p + bytes), or NULL. */
const Alloc *find_alloc(const void *p, size_t bytes, uintptr_t *base)
{
  const uintptr_t a = (uintptr_t)p;
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin())
    return nullptr;
  --it;
  if (a < it->first || a + bytes > it->first + it->second.bytes)
    return nullptr;
  if (base)
    *base = it->first;
  return &it->second;
}

bool is_device(const void *p, size_t bytes)
{
  const Alloc *a = find_alloc(p, bytes, nullptr);
  return a && a->device;
}

// ---- streams and events ------------------------------------------------------------------------

double now_seconds()
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

} // namespace

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  double at;
};

namespace {
std::vector<CUstream_st *> g_streams;
std::vector<CUevent_st *> g_events;

bool stream_ok(cudaStream_t s)
{
  return !s || std::find(g_streams.begin(), g_streams.end(), s) != g_streams.end();
}
bool event_ok(cudaEvent_t e)
{
  return e && std::find(g_events.begin(), g_events.end(), e) != g_events.end();
}

// ---- context switches -----------------------------------------------------------------------
/* x86-64: a switch of the callee-saved registers, the stack pointer and the
 * floating-point control words (no system call); elsewhere ucontext, whose
 * swapcontext also saves the signal mask with a system call, ~20x slower. A
 * launch switches some 10^7 - 10^8 times. */
#if defined(__x86_64__)
extern "C" void gt_emu_switch(void **save_sp, void *load_sp);
asm(R"(
  .text
  .globl gt_emu_switch
  .hidden gt_emu_switch
  .type gt_emu_switch, @function
gt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gt_emu_switch, .-gt_emu_switch
)");

struct Context {
  void *sp;
};

/* A context that starts entry() on [stack, stack + size): the frame
 * gt_emu_switch pops, then entry's address to return to, then a zero
 * return address (entry never returns), 16-byte alignment as after a call. */
void ctx_init(Context *c, char *stack, size_t size, void (*entry)())
{
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t *f = reinterpret_cast<uint64_t *>(top) - 9;
  memset(f, 0, 9 * sizeof *f);
  uint32_t mxcsr;
  uint16_t fcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  memcpy(reinterpret_cast<char *>(f), &mxcsr, 4);
  memcpy(reinterpret_cast<char *>(f) + 4, &fcw, 2);
  f[7] = reinterpret_cast<uint64_t>(entry);
  c->sp = f;
}

inline void ctx_switch(Context *from, Context *to) { gt_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};

void ctx_init(Context *c, char *stack, size_t size, void (*entry)())
{
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}

inline void ctx_switch(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
#endif

// ---- fibers ------------------------------------------------------------------------------------

enum class FiberState { Ready, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
  Context ctx;
  uint3 tid;
  unsigned lin; /* linear thread index in the block */
  FiberState state;
  char *stack;
};

struct Warp {
  unsigned want = 0;      /* the mask of the barrier being assembled */
  unsigned arrived = 0;   /* lanes waiting in it */
  unsigned gen = 0;       /* barriers completed */
  unsigned valid = 0;     /* lanes that exist (a last, partial warp has fewer) */
  unsigned ended = 0;     /* lanes whose thread has ended */
  uint64_t slot[2][32];   /* exchange buffers, by the parity of gen */
  unsigned vote[2][32];
};

struct Block {
  const char *kernel;
  dim3 grid, block;
  uint3 idx;
  unsigned nthreads;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned live = 0;        /* fibers not yet ended */
  unsigned at_barrier = 0;  /* fibers waiting in __syncthreads */
  std::vector<unsigned> ready; /* fibers that can run (the running one is not listed) */
  Fiber *cur = nullptr;
  Context sched;
  const std::function<void()> *body = nullptr;
  uint64_t rng = 0;
  bool failed = false;
  std::string why;
#ifdef GT_EMU_ASAN
  void *sched_fake_stack = nullptr;
  const void *sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
#endif
};

Block *g_block = nullptr;
void *g_dynamic_shared = nullptr;
unsigned long g_launches = 0;
unsigned long long g_switches = 0, g_fibers = 0;

/* The stacks, kept for the next launch: mmap'd with a guard page below. */
const size_t kStackBytes = (size_t)256 << 10;
const size_t kGuardBytes = (size_t)4 << 10;
std::vector<char *> g_stacks;

/* The stack of fiber i. A fiber that ended never returned from its frames,
 * so AddressSanitizer's marks of them are cleared before the stack is used
 * again. */
char *stack_for(size_t i)
{
#ifdef GT_EMU_ASAN
  if (i < g_stacks.size())
    __asan_unpoison_memory_region(g_stacks[i], kStackBytes);
#endif
  while (g_stacks.size() <= i) {
    void *m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      fprintf(stderr, "cuda-emu: cannot map a fiber stack\n");
      abort();
    }
    mprotect(m, kGuardBytes, PROT_NONE);
    g_stacks.push_back(static_cast<char *>(m) + kGuardBytes);
  }
  return g_stacks[i];
}

uint64_t next_random(uint64_t *s)
{
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Switch from the running fiber back to the scheduler. */
void to_scheduler(Block *b, bool ending)
{
  Fiber *f = b->cur;
#ifdef GT_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(ending ? nullptr : &fake, b->sched_stack_bottom,
                                 b->sched_stack_size);
  ctx_switch(&f->ctx, &b->sched);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)ending;
  ctx_switch(&f->ctx, &b->sched);
#endif
}

void block_fail(Block *b, const std::string &why)
{
  if (!b->failed) {
    b->failed = true;
    b->why = why;
  }
  to_scheduler(b, true); /* never resumed */
}

std::string where(const Block *b, const Fiber *f)
{
  char buf[256];
  snprintf(buf, sizeof buf, "kernel %.120s, block (%u,%u,%u), thread (%u,%u,%u)", b->kernel,
           b->idx.x, b->idx.y, b->idx.z, f->tid.x, f->tid.y, f->tid.z);
  return buf;
}

/* A warp's lanes [first, first + 32) that wait with mask `want` go on. */
void release_warp(Block *b, unsigned w)
{
  Warp &wp = b->warps[w];
  for (unsigned l = 0; l < 32; l++)
    if (wp.want & (1u << l)) {
      Fiber &f = b->fibers[w * 32 + l];
      if (f.state == FiberState::AtWarpBarrier) {
        f.state = FiberState::Ready;
        if (&f != b->cur)
          b->ready.push_back(f.lin);
      }
    }
  wp.arrived = 0;
  wp.want = 0;
  wp.gen++;
}

void release_block(Block *b)
{
  for (Fiber &f : b->fibers)
    if (f.state == FiberState::AtBlockBarrier) {
      f.state = FiberState::Ready;
      if (&f != b->cur)
        b->ready.push_back(f.lin);
    }
  b->at_barrier = 0;
}

void fiber_entry()
{
  Block *b = g_block;
  Fiber *f = b->cur;
#ifdef GT_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b->sched_stack_bottom, &b->sched_stack_size);
#endif
  (*b->body)();
  f->state = FiberState::Done;
  b->live--;
  Warp &wp = b->warps[f->lin / 32];
  const unsigned bit = 1u << (f->lin % 32);
  wp.ended |= bit;
  if (wp.arrived && (wp.want & bit))
    block_fail(b, where(b, f) + ": ended while its warp waits for it in a warp operation");
  if (b->at_barrier > 0 && b->at_barrier == b->live)
    release_block(b);
  to_scheduler(b, true);
}

void run_block(Block *b)
{
  const unsigned n = b->nthreads;
  b->fibers.assign(n, Fiber{});
  b->warps.assign((n + 31) / 32, Warp{});
  for (unsigned w = 0; w < b->warps.size(); w++) {
    const unsigned lanes = n - w * 32 < 32 ? n - w * 32 : 32;
    b->warps[w].valid = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  b->live = n;
  b->at_barrier = 0;
  g_fibers += n;
  for (unsigned i = 0; i < n; i++) {
    Fiber &f = b->fibers[i];
    f.lin = i;
    f.tid = uint3{i % b->block.x, (i / b->block.x) % b->block.y, i / (b->block.x * b->block.y)};
    f.state = FiberState::Ready;
    f.stack = stack_for(i);
    ctx_init(&f.ctx, f.stack, kStackBytes, fiber_entry);
  }
  b->ready.resize(n);
  std::iota(b->ready.begin(), b->ready.end(), 0u);
  while (!b->failed && b->live > 0) {
    if (b->ready.empty()) { /* everyone waits: a barrier some threads never reach */
      unsigned at_block = 0, at_warp = 0, done = 0;
      for (const Fiber &f : b->fibers) {
        at_block += f.state == FiberState::AtBlockBarrier;
        at_warp += f.state == FiberState::AtWarpBarrier;
        done += f.state == FiberState::Done;
      }
      char buf[256];
      snprintf(buf, sizeof buf,
               "kernel %.120s, block (%u,%u,%u): deadlock: %u threads wait in __syncthreads, %u "
               "in a warp operation, %u have ended",
               b->kernel, b->idx.x, b->idx.y, b->idx.z, at_block, at_warp, done);
      b->failed = true;
      b->why = buf;
      break;
    }
    const size_t pick = next_random(&b->rng) % b->ready.size();
    Fiber *f = &b->fibers[b->ready[pick]];
    b->ready[pick] = b->ready.back();
    b->ready.pop_back();
    b->cur = f;
    g_switches++;
#ifdef GT_EMU_ASAN
    __sanitizer_start_switch_fiber(&b->sched_fake_stack, f->stack, kStackBytes);
    ctx_switch(&b->sched, &f->ctx);
    __sanitizer_finish_switch_fiber(b->sched_fake_stack, nullptr, nullptr);
#else
    ctx_switch(&b->sched, &f->ctx);
#endif
  }
}

} // namespace

// ---- what kernels see --------------------------------------------------------------------

namespace gt_emu {

const uint3 &thread_idx() { return g_block->cur->tid; }
const uint3 &block_idx() { return g_block->idx; }
const dim3 &block_dim() { return g_block->block; }
const dim3 &grid_dim() { return g_block->grid; }
void *dynamic_shared() { return g_dynamic_shared; }
unsigned lane_id() { return g_block->cur->lin % 32; }

void sync_block()
{
  Block *b = g_block;
  Fiber *f = b->cur;
  f->state = FiberState::AtBlockBarrier;
  b->at_barrier++;
  if (b->at_barrier == b->live) {
    release_block(b); /* the last to arrive goes on */
    return;
  }
  to_scheduler(b, false);
}

/* Arrive at the warp barrier of mask; returns the generation it completes. */
static unsigned warp_arrive(unsigned mask)
{
  Block *b = g_block;
  Fiber *f = b->cur;
  const unsigned w = f->lin / 32, bit = 1u << (f->lin % 32);
  Warp &wp = b->warps[w];
  if (!(mask & bit))
    block_fail(b, where(b, f) + ": a warp operation whose mask leaves out the calling lane");
  if (mask & ~wp.valid)
    block_fail(b, where(b, f) + ": a warp operation's mask names lanes the block does not have");
  if (mask & wp.ended)
    block_fail(b, where(b, f) + ": a warp operation's mask names a lane that has ended");
  if (wp.arrived == 0)
    wp.want = mask;
  else if (wp.want != mask)
    block_fail(b, where(b, f) + ": lanes of one warp meet with different masks");
  const unsigned gen = wp.gen;
  wp.arrived |= bit;
  f->state = FiberState::AtWarpBarrier;
  if (wp.arrived == wp.want) {
    release_warp(b, w); /* the last to arrive goes on */
    return gen;
  }
  to_scheduler(b, false);
  return gen;
}

void sync_warp(unsigned mask) { (void)warp_arrive(mask); }

void warp_exchange(unsigned mask, const void *mine, size_t bytes, int src, void *out)
{
  Block *b = g_block;
  Fiber *f = b->cur;
  Warp &wp = b->warps[f->lin / 32];
  const unsigned lane = f->lin % 32;
  uint64_t v = 0;
  memcpy(&v, mine, bytes);
  wp.slot[wp.gen & 1][lane] = v;
  const unsigned gen = warp_arrive(mask);
  /* the next exchange writes the other buffer, and the one after can start
   * only once every lane (this one too) has read this one */
  const unsigned from = src >= 0 && src < 32 && (mask & (1u << src)) ? (unsigned)src : lane;
  memcpy(out, &wp.slot[gen & 1][from], bytes);
}

unsigned warp_ballot(unsigned mask, bool pred)
{
  Block *b = g_block;
  Fiber *f = b->cur;
  Warp &wp = b->warps[f->lin / 32];
  wp.vote[wp.gen & 1][f->lin % 32] = pred;
  const unsigned gen = warp_arrive(mask);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; l++)
    if ((mask & (1u << l)) && wp.vote[gen & 1][l])
      r |= 1u << l;
  return r;
}

void launch(const char *name, dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
            const std::function<void()> &body)
{
  std::lock_guard<std::mutex> guard(g_lock);
  g_launches++;
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (!stream_ok(stream)) {
    fail(cudaErrorInvalidResourceHandle, "%s: launched on a stream that does not exist", name);
    return;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x > 2147483647u ||
      grid.y > 65535 || grid.z > 65535 || smem_bytes > ((size_t)227 << 10)) {
    fail(cudaErrorInvalidConfiguration,
         "%s: invalid configuration: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic "
         "shared memory",
         name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes);
    return;
  }
  std::vector<unsigned char> dyn(smem_bytes ? smem_bytes : 1, 0xff);
  g_dynamic_shared = dyn.data();

  const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
  std::vector<uint64_t> order(nblocks);
  std::iota(order.begin(), order.end(), 0);
  uint64_t seed = 0x9e3779b97f4a7c15ull * (g_launches + 1);
  for (uint64_t i = nblocks; i > 1; i--) /* Fisher-Yates */
    std::swap(order[i - 1], order[next_random(&seed) % i]);

  /* the kernel, without the rest of the launch's arguments */
  std::string kernel;
  for (int depth = 0; *name && !(depth == 0 && *name == ','); name++) {
    depth += *name == '<' || *name == '(';
    depth -= *name == '>' || *name == ')';
    kernel += *name;
  }
  Block b;
  b.kernel = kernel.c_str();
  b.grid = grid;
  b.block = block;
  b.nthreads = (unsigned)threads;
  b.body = &body;
  for (uint64_t k = 0; k < nblocks && !b.failed; k++) {
    const uint64_t i = order[k];
    b.idx = uint3{(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y),
                  (unsigned)(i / ((uint64_t)grid.x * grid.y))};
    b.rng = seed ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
    g_block = &b;
    run_block(&b);
  }
  g_block = nullptr;
  g_dynamic_shared = nullptr;
  if (b.failed)
    fail(cudaErrorLaunchFailure, "%s", b.why.c_str());
}

void radix_sort_pairs_u32(const uint32_t *keys_in, uint32_t *keys_out, const uint32_t *values_in,
                          uint32_t *values_out, int n, int begin_bit, int end_bit)
{
  const uint32_t mask =
      end_bit - begin_bit >= 32 ? 0xffffffffu : ((1u << (end_bit - begin_bit)) - 1u);
  std::vector<uint32_t> idx((size_t)n);
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return ((keys_in[a] >> begin_bit) & mask) < ((keys_in[b] >> begin_bit) & mask);
  });
  std::vector<uint32_t> k((size_t)n), v((size_t)n);
  for (int i = 0; i < n; i++) {
    k[(size_t)i] = keys_in[idx[(size_t)i]];
    v[(size_t)i] = values_in[idx[(size_t)i]];
  }
  std::copy(k.begin(), k.end(), keys_out);
  std::copy(v.begin(), v.end(), values_out);
}

} // namespace gt_emu

// ---- the runtime API --------------------------------------------------------------------------

extern "C" {

const char *cudaGetErrorName(cudaError_t err)
{
  switch (err) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInitializationError: return "cudaErrorInitializationError";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
  case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t err)
{
  switch (err) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInitializationError: return "initialization error";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevicePointer: return "invalid device pointer";
  case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorLaunchFailure: return "unspecified launch failure (emulator: see its message)";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
  std::lock_guard<std::mutex> guard(g_lock);
  const cudaError_t e = g_sticky;
  g_sticky = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void)
{
  std::lock_guard<std::mutex> guard(g_lock);
  return g_sticky;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
  *version = GT_CUDA_EMU_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
  *version = GT_CUDA_EMU_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
  return device == 0 ? cudaSuccess
                     : fail(cudaErrorInvalidValue, "cudaSetDevice(%d): one device", device);
}

cudaError_t cudaGetDevice(int *device)
{
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
  if (device != 0)
    return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties(%d): one device", device);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "gridtrain CUDA emulator");
  prop->totalGlobalMem = kDeviceMemory;
  prop->multiProcessorCount = 2; /* small: grids capped by the SM count stride too */
  prop->major = 9;
  prop->minor = 0;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device)
{
  (void)device;
  snprintf(bus_id, (size_t)len, "emulated");
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
  std::lock_guard<std::mutex> guard(g_lock);
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - g_device_bytes;
  return cudaSuccess;
}

static cudaError_t alloc_any(void **ptr, size_t bytes, bool device)
{
  std::lock_guard<std::mutex> guard(g_lock);
  if (!ptr)
    return fail(cudaErrorInvalidValue, "cudaMalloc: NULL result pointer");
  if (device && g_device_bytes + bytes > kDeviceMemory)
    return g_sticky = cudaErrorMemoryAllocation;
  void *p = nullptr; /* exactly `bytes`: AddressSanitizer sees every byte past the end */
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0)
    return g_sticky = cudaErrorMemoryAllocation;
  memset(p, 0xa5, bytes); /* fresh device memory is not zero */
  g_allocs[(uintptr_t)p] = Alloc{bytes, device};
  if (device)
    g_device_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}

static cudaError_t free_any(void *ptr, bool device)
{
  if (!ptr)
    return cudaSuccess;
  std::lock_guard<std::mutex> guard(g_lock);
  auto it = g_allocs.find((uintptr_t)ptr);
  if (it == g_allocs.end() || it->second.device != device)
    return fail(cudaErrorInvalidDevicePointer, "%s(%p): not the start of a live %s allocation",
                device ? "cudaFree" : "cudaFreeHost", ptr, device ? "device" : "pinned host");
  if (device)
    g_device_bytes -= it->second.bytes;
  g_allocs.erase(it);
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) { return alloc_any(ptr, bytes, true); }
cudaError_t cudaFree(void *ptr) { return free_any(ptr, true); }
cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return alloc_any(ptr, bytes, false); }
cudaError_t cudaFreeHost(void *ptr) { return free_any(ptr, false); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
  std::lock_guard<std::mutex> guard(g_lock);
  if (!stream_ok(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync on a stream that does not exist");
  if (bytes == 0)
    return cudaSuccess;
  const bool dst_dev = is_device(dst, bytes), src_dev = is_device(src, bytes);
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && (want_dst != dst_dev || want_src != src_dev)) {
    const bool dst_any = find_alloc(dst, 1, nullptr) && find_alloc(dst, 1, nullptr)->device;
    const bool src_any = find_alloc(src, 1, nullptr) && find_alloc(src, 1, nullptr)->device;
    return fail(cudaErrorInvalidValue,
                "cudaMemcpyAsync of %zu bytes, kind %d: destination %p is %s, source %p is %s", bytes,
                (int)kind, dst, dst_dev ? "device memory" : dst_any ? "device memory overrun" : "host",
                src, src_dev ? "device memory" : src_any ? "device memory overrun" : "host");
  }
  memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream)
{
  std::lock_guard<std::mutex> guard(g_lock);
  if (!stream_ok(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync on a stream that does not exist");
  if (bytes == 0)
    return cudaSuccess;
  if (!is_device(ptr, bytes))
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync of %zu bytes at %p: not inside one device "
                "allocation", bytes, ptr);
  memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
  std::lock_guard<std::mutex> guard(g_lock);
  CUstream_st *s = new CUstream_st{flags};
  g_streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
  std::lock_guard<std::mutex> guard(g_lock);
  auto it = std::find(g_streams.begin(), g_streams.end(), stream);
  if (!stream || it == g_streams.end())
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): no such stream",
                (void *)stream);
  g_streams.erase(it);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
  std::lock_guard<std::mutex> guard(g_lock);
  return stream_ok(stream) ? cudaSuccess
                           : fail(cudaErrorInvalidResourceHandle,
                                  "cudaStreamSynchronize on a stream that does not exist");
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
  (void)flags;
  std::lock_guard<std::mutex> guard(g_lock);
  if (!stream_ok(stream) || !event_ok(event))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: no such stream or event");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
  std::lock_guard<std::mutex> guard(g_lock);
  CUevent_st *e = new CUevent_st{flags, false, 0.0};
  g_events.push_back(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
  std::lock_guard<std::mutex> guard(g_lock);
  auto it = std::find(g_events.begin(), g_events.end(), event);
  if (it == g_events.end())
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): no such event",
                (void *)event);
  g_events.erase(it);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
  std::lock_guard<std::mutex> guard(g_lock);
  if (!event_ok(event) || !stream_ok(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: no such event or stream");
  event->recorded = true;
  event->at = now_seconds();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
  std::lock_guard<std::mutex> guard(g_lock);
  return event_ok(event) ? cudaSuccess
                         : fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: no such event");
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
  std::lock_guard<std::mutex> guard(g_lock);
  if (!event_ok(start) || !event_ok(end))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: no such event");
  if ((start->flags | end->flags) & cudaEventDisableTiming || !start->recorded || !end->recorded)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: an event without timing or not recorded");
  *ms = (float)((end->at - start->at) * 1e3);
  return cudaSuccess;
}

size_t gt_emu_device_bytes(void)
{
  std::lock_guard<std::mutex> guard(g_lock);
  return g_device_bytes;
}

__attribute__((destructor)) static void gt_emu_report(void)
{
  if (getenv("GT_EMU_STATS"))
    fprintf(stderr, "cuda-emu: %lu launches, %llu fibers, %llu switches\n", g_launches,
            g_fibers, g_switches);
}

unsigned long gt_emu_launches(void)
{
  std::lock_guard<std::mutex> guard(g_lock);
  return g_launches;
}

} /* extern "C" */
