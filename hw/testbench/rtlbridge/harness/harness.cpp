// The co-simulation harness: runs a Verilator model of the user's top level
// (the logic across from the XDMA IP) and exchanges its AXI-Stream beats,
// AXI-Lite transactions and user interrupts with the Go XDMA model through
// a shared-memory file laid out by hw/testbench/rtlbridge (layout.go).
//
// Beats move only when tvalid and tready are both high. C2H tready is
// derived here from the credits the model grants (free ring entries), so
// no beat waits on a message. Shared state is read and published once per
// quantum of cycles: in synchronised mode the model grants each quantum
// and the run is deterministic; in free-running mode the clock never waits.
//
// Usage: harness <shared-memory file>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "verilated.h"
#include "rtl_top.h" // written by the build: includes the model's header, defines RTL_TOP and the widths

// Offsets into the shared file: keep in step with layout.go.
enum : size_t {
    OFF_MAGIC = 0, OFF_C2H_BITS = 8, OFF_H2C_BITS = 16, OFF_MODE = 24, OFF_QUANTUM = 32,
    OFF_C2H_DEPTH = 40, OFF_H2C_DEPTH = 48, OFF_CMD_DEPTH = 56,
    OFF_RTL_STATE = 64, OFF_RTL_C2H_BITS = 72, OFF_RTL_H2C_BITS = 80, OFF_RTL_PID = 88,
    OFF_CYCLE = 128, OFF_GRANT = 192, OFF_STOP = 256, OFF_C2H_TAIL = 320, OFF_C2H_HEAD = 384,
    OFF_H2C_TAIL = 448, OFF_H2C_HEAD = 512, OFF_CMD_TAIL = 576, OFF_CMD_DONE = 640,
    OFF_IRQ_REQ = 704, OFF_IRQ_ACK_SEQ = 768, OFF_IRQ_ACK_MASK = 776,
    OFF_RESET_SEQ = 832, OFF_RESET_ACK = 896, OFF_RESET_TAIL = 904, OFF_RINGS = 4096,
};
static const uint64_t MAGIC = 0x31304752424c5452ull; // "RTLBRG01"
static const uint64_t AXIL_TIMEOUT = 10000;           // cycles before a transaction is abandoned
static const unsigned RESET_CYCLES = 16;              // axi_aresetn low at start and after each reset

static uint8_t *shm;
static std::atomic<uint64_t> &word(size_t off) { return *reinterpret_cast<std::atomic<uint64_t> *>(shm + off); }
static uint64_t load(size_t off) { return word(off).load(std::memory_order_acquire); }
static void store(size_t off, uint64_t v) { word(off).store(v, std::memory_order_release); }

static size_t entry_size(unsigned bits) { return 32 + ((bits / 8 + 7) & ~size_t(7)); }

template <typename T> static void get_bytes(const T &v, uint8_t *out, size_t n) {
    uint64_t x = v;
    memcpy(out, &x, n < 8 ? n : 8);
}
template <std::size_t N> static void get_bytes(const VlWide<N> &v, uint8_t *out, size_t n) { memcpy(out, v.data(), n); }
template <typename T> static void set_bytes(T &v, const uint8_t *in, size_t n) {
    uint64_t x = 0;
    memcpy(&x, in, n < 8 ? n : 8);
    v = static_cast<T>(x);
}
template <std::size_t N> static void set_bytes(VlWide<N> &v, const uint8_t *in, size_t n) { memcpy(v.data(), in, n); }

static void die(const char *msg) {
    fprintf(stderr, "rtl harness: %s\n", msg);
    exit(2);
}

// wait spins, then yields, then sleeps: the model may be on the same core.
static void wait_step(unsigned &spins) {
    if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield");
#endif
    } else if (spins < 4096) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, nullptr);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) die("usage: harness <shared-memory file>");
    prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the model
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) die("cannot open the shared-memory file");
    struct stat st;
    if (fstat(fd, &st) != 0) die("cannot stat the shared-memory file");
    shm = static_cast<uint8_t *>(mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (shm == MAP_FAILED) die("cannot map the shared-memory file");
    if (load(OFF_MAGIC) != MAGIC) die("the shared-memory file has the wrong magic (a harness of another version?)");

    const uint64_t mode = load(OFF_MODE), quantum = load(OFF_QUANTUM);
    const uint64_t c2h_depth = load(OFF_C2H_DEPTH), h2c_depth = load(OFF_H2C_DEPTH), cmd_depth = load(OFF_CMD_DEPTH);
    const size_t c2h_es = entry_size(RTL_C2H_BITS), h2c_es = entry_size(RTL_H2C_BITS);
    const size_t need = OFF_RINGS + c2h_depth * c2h_es + h2c_depth * h2c_es + cmd_depth * 32;
    if (quantum == 0 || (size_t)st.st_size < need) die("the shared-memory file is too small for its rings");
    uint8_t *c2h_ring = shm + OFF_RINGS;
    uint8_t *h2c_ring = c2h_ring + c2h_depth * c2h_es;
    uint8_t *cmd_ring = h2c_ring + h2c_depth * h2c_es;

    store(OFF_RTL_C2H_BITS, RTL_C2H_BITS);
    store(OFF_RTL_H2C_BITS, RTL_H2C_BITS);
    store(OFF_RTL_PID, getpid());
    store(OFF_RTL_STATE, 1); // hello: the model checks the widths

    VerilatedContext ctx;
    RTL_TOP top(&ctx);
    const size_t c2h_bytes = RTL_C2H_BITS / 8, h2c_bytes = RTL_H2C_BITS / 8;

    uint64_t cycle = 0, c2h_tail = 0, h2c_head = 0, cmd_done = 0, irq_ack_seen = 0, reset_seen = 0;
    unsigned reset_left = RESET_CYCLES;
    // AXI-Lite master state: 0 idle, 1 write (aw and w out), 2 read.
    int axil = 0;
    bool aw_done = false, w_done = false;
    uint64_t axil_start = 0;
    unsigned ack_cycles = 0;
    uint64_t ack_mask = 0;

    top.axi_aclk = 0;
    top.axi_aresetn = 0;
    top.eval();
    for (;;) {
        // Sample what the model has granted, once per quantum.
        uint64_t limit;
        if (mode == 0) {
            unsigned spins = 0;
            while (load(OFF_GRANT) <= cycle) {
                if (load(OFF_STOP)) return 0;
                wait_step(spins);
            }
            limit = load(OFF_GRANT);
        } else {
            if (load(OFF_STOP)) return 0;
            limit = cycle + quantum;
        }
        const uint64_t c2h_head = load(OFF_C2H_HEAD), h2c_tail = load(OFF_H2C_TAIL), cmd_tail = load(OFF_CMD_TAIL);
        // A reset from the model (the PCIe function's): axi_aresetn falls
        // for RESET_CYCLES, the H2C beats queued are dropped, a
        // transaction in flight is abandoned, and the model is told
        // where the C2H stream starts again.
        const uint64_t reset_seq = load(OFF_RESET_SEQ);
        if (reset_seq != reset_seen) {
            reset_seen = reset_seq;
            reset_left = RESET_CYCLES;
            h2c_head = h2c_tail;
            if (axil != 0) {
                uint8_t *c = cmd_ring + (cmd_done % cmd_depth) * 32;
                const uint32_t resp = 0x100, rdata = 0;
                memcpy(c + 16, &resp, 4);
                memcpy(c + 20, &rdata, 4);
                memcpy(c + 24, &cycle, 8);
                cmd_done++;
                axil = 0;
            }
            store(OFF_RESET_TAIL, c2h_tail);
        }
        const uint64_t ack_seq = load(OFF_IRQ_ACK_SEQ);
        if (ack_seq != irq_ack_seen) {
            irq_ack_seen = ack_seq;
            ack_mask = load(OFF_IRQ_ACK_MASK);
            ack_cycles = 1;
        }
        for (; cycle < limit; cycle++) {
            // Inputs for this rising edge.
            top.axi_aresetn = reset_left == 0;
            if (reset_left) reset_left--;
            top.s_axis_c2h_tready_0 = top.axi_aresetn && c2h_tail - c2h_head < c2h_depth;
            const bool h2c_have = top.axi_aresetn && h2c_head < h2c_tail;
            top.m_axis_h2c_tvalid_0 = h2c_have;
            if (h2c_have) {
                const uint8_t *e = h2c_ring + (h2c_head % h2c_depth) * h2c_es;
                uint64_t keep, last;
                memcpy(&keep, e + 8, 8);
                memcpy(&last, e + 16, 8);
                set_bytes(top.m_axis_h2c_tdata_0, e + 32, h2c_bytes);
                top.m_axis_h2c_tkeep_0 = keep;
                top.m_axis_h2c_tlast_0 = last & 1;
            }
            top.usr_irq_ack = ack_cycles ? ack_mask : 0;
            if (ack_cycles) ack_cycles--;
            if (axil == 0 && top.axi_aresetn && cmd_done < cmd_tail) {
                const uint8_t *c = cmd_ring + (cmd_done % cmd_depth) * 32;
                uint32_t op, addr, data, strb;
                memcpy(&op, c, 4);
                memcpy(&addr, c + 4, 4);
                memcpy(&data, c + 8, 4);
                memcpy(&strb, c + 12, 4);
                axil = op == 2 ? 1 : 2;
                aw_done = w_done = false;
                axil_start = cycle;
                top.m_axil_awaddr = addr;
                top.m_axil_araddr = addr;
                top.m_axil_wdata = data;
                top.m_axil_wstrb = strb;
            }
            top.m_axil_awvalid = axil == 1 && !aw_done;
            top.m_axil_wvalid = axil == 1 && !w_done;
            top.m_axil_bready = axil == 1;
            top.m_axil_arvalid = axil == 2 && !aw_done;
            top.m_axil_rready = axil == 2;
            top.eval();

            // Handshakes at this edge.
            if (top.s_axis_c2h_tvalid_0 && top.s_axis_c2h_tready_0) {
                uint8_t *e = c2h_ring + (c2h_tail % c2h_depth) * c2h_es;
                const uint64_t keep = top.s_axis_c2h_tkeep_0, last = top.s_axis_c2h_tlast_0;
                memcpy(e, &cycle, 8);
                memcpy(e + 8, &keep, 8);
                memcpy(e + 16, &last, 8);
                get_bytes(top.s_axis_c2h_tdata_0, e + 32, c2h_bytes);
                c2h_tail++;
            }
            if (h2c_have && top.m_axis_h2c_tready_0) h2c_head++;
            if (axil != 0) {
                uint8_t *c = cmd_ring + (cmd_done % cmd_depth) * 32;
                bool done = false;
                uint32_t resp = 0, rdata = 0;
                if (axil == 1) {
                    if (top.m_axil_awvalid && top.m_axil_awready) aw_done = true;
                    if (top.m_axil_wvalid && top.m_axil_wready) w_done = true;
                    if (top.m_axil_bvalid) { // bready is high throughout
                        done = true;
                        resp = top.m_axil_bresp;
                    }
                } else {
                    if (top.m_axil_arvalid && top.m_axil_arready) aw_done = true;
                    if (top.m_axil_rvalid) {
                        done = true;
                        resp = top.m_axil_rresp;
                        rdata = top.m_axil_rdata;
                    }
                }
                if (!done && cycle - axil_start >= AXIL_TIMEOUT) {
                    done = true;
                    resp = 0x100; // no response: the model reports it
                }
                if (done) {
                    memcpy(c + 16, &resp, 4);
                    memcpy(c + 20, &rdata, 4);
                    memcpy(c + 24, &cycle, 8);
                    cmd_done++;
                    axil = 0;
                }
            }
            top.axi_aclk = 1;
            top.eval();
            top.axi_aclk = 0;
            top.eval();
        }
        store(OFF_C2H_TAIL, c2h_tail);
        store(OFF_H2C_HEAD, h2c_head);
        store(OFF_CMD_DONE, cmd_done);
        store(OFF_IRQ_REQ, static_cast<uint64_t>(top.usr_irq_req));
        store(OFF_RESET_ACK, reset_seen);
        store(OFF_CYCLE, cycle);
        if (Verilated::gotFinish()) {
            fprintf(stderr, "rtl harness: the design called $finish at cycle %llu\n", (unsigned long long)cycle);
            return 3;
        }
    }
}
