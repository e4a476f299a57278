/*
 * xdma-model: a PCI device whose registers live in another process.
 *
 * The rig's XDMA engine is simulated by a Go process (hw/testbench/devmodel).
 * This device gives it a real PCI function in the guest: Xilinx's IDs,
 * PG195's BAR layout (an optional AXI-Lite user BAR at BAR0, then the 64 KiB
 * DMA BAR with the MSI-X table at 0x8000 and its PBA at 0x8fe0), an MSI-X
 * capability, an MSI capability and INTx pin A; function-level reset, a
 * power management capability whose D3hot to D0 transition resets the
 * function (No_Soft_Reset clear, as on XDMA cards), and AER, so that the
 * guest's AER driver (and QEMU's pcie_aer_inject_error) can report errors
 * on it. Each reset clears the engine's state in the model: every register
 * back at its reset value. Every access to the BARs
 * outside the MSI-X structures is forwarded, synchronously, to the model
 * over a socket; the model raises interrupts over a second connection, and
 * the device delivers them through whichever of MSI-X, MSI or INTx the
 * guest enabled. The model reaches guest RAM and the simulated GPU's VRAM
 * through their shared memory backends, as a device reaches them over the
 * bus; where an IOMMU translates for the device, the model first asks the
 * device what a DMA address translates to, as a device's DMA would go
 * through the IOMMU.
 *
 * Protocol (hw/testbench/devmodel/pcidev.go), little-endian:
 *   request connection, device to model: 24-byte requests
 *     { u8 op; u8 bar; u8 size; u8 pad[5]; u64 addr; u64 data }
 *     op 1 read (answered by a u64), 2 write (posted, not answered),
 *     3 interrupt mode changed (data: 0 INTx, 1 MSI, 2 MSI-X), 4 reset,
 *     5 bus mastering changed (data: 1 on, 0 off), in order with the
 *     BAR writes around it, so that the model stops its DMA when the
 *     host cuts it off the bus, as a function does,
 *     6 tick (data: the virtual clock in ns; answered by a u64: the ns
 *     to the next tick, 0 for tick-ns, at most 1 s), sent every tick-ns of QEMU's
 *     virtual clock when that property is set, or as the model asked:
 *     the model runs the card up to that time and answers once it has,
 *     so its DMA and interrupts happen at points of the guest's
 *     instruction stream that the virtual clock fixes (with -icount, the
 *     same points whatever the host's load);
 *   interrupt connection, model to device: 8-byte messages
 *     { u8 kind; u8 pad[3]; u32 value }
 *     kind 1 edge on vector value (MSI-X, MSI), 2 INTx level value;
 *   and 16-byte translation requests on the same connection
 *     { u8 kind = 3; u8 write; u8 pad[2]; u32 len; u64 addr },
 *     answered on it by { u8 ok; u8 region; u8 pad[2]; u32 len; u64 off }:
 *     what the device's DMA to addr reaches, through the IOMMU if one
 *     translates for it: len bytes (at most those asked) at offset off of
 *     region 1 (the memory backend "ram0", guest RAM) or 2 ("vram"); ok 0
 *     when it reaches neither (an IOMMU fault, or bus mastering off).
 * Each connection starts with an 8-byte hello from the device:
 *   { "XDMAMDL"; u8 role } with role 0 for requests, 1 for interrupts.
 *
 * The model writes the interrupts it raised before a read's answer, and the
 * device applies them before it returns the value: as on PCIe, where a
 * completion does not pass an earlier MSI or INTx message.
 *
 * A model that has gone away, or leaves a read unanswered for 10 s (the
 * BQL is held meanwhile), reads as a device that fell off the bus: all
 * ones, as PCIe returns for a request nobody completes.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <poll.h>
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qemu/rcu.h"
#include "qemu/sockets.h"
#include "qemu/timer.h"
#include "qapi/error.h"
#include "exec/memory.h"
#include "hw/pci/pci.h"
#include "migration/vmstate.h"
#include "hw/pci/pcie.h"
#include "hw/pci/pcie_aer.h"
#include "hw/pci/msi.h"
#include "hw/pci/msix.h"
#include "hw/qdev-properties.h"
#include "qom/object.h"

#define TYPE_XDMA_MODEL "xdma-model"
OBJECT_DECLARE_SIMPLE_TYPE(XdmaModelState, XDMA_MODEL)

#define XDMA_DMA_BAR_SIZE       0x10000
#define XDMA_MSIX_TABLE         0x8000
#define XDMA_MSIX_PBA           0x8fe0
#define XDMA_MAX_VECTORS        32
#define XDMA_MODEL_TIMEOUT_S    10
#define XDMA_TICK_MAX_NS        1000000000  /* a tick, or the wait for the next */

enum {
    OP_READ = 1,
    OP_WRITE = 2,
    OP_MODE = 3,
    OP_RESET = 4,
    OP_MASTER = 5,
    OP_TICK = 6,
};

enum {
    IRQ_EDGE = 1,
    IRQ_LEVEL = 2,
    MSG_TRANSLATE = 3,
};

enum {
    REGION_RAM = 1,
    REGION_VRAM = 2,
};

#define XDMA_MSG_LEN            8
#define XDMA_TRANSLATE_LEN      16

enum {
    MODE_INTX = 0,
    MODE_MSI = 1,
    MODE_MSIX = 2,
};

typedef struct XdmaBar {
    XdmaModelState *s;
    MemoryRegion mr;
    uint8_t index;          /* the model's BAR number: 0 DMA, 1 user */
} XdmaBar;

struct XdmaModelState {
    PCIDevice parent_obj;

    XdmaBar dma;
    XdmaBar user;
    int req_fd;
    int irq_fd;
    uint8_t irq_buf[XDMA_TRANSLATE_LEN];
    unsigned irq_have;
    bool intx_level;
    bool master;            /* PCI_COMMAND_MASTER, as the model was told */
    int mode;
    bool gone;
    int pm_cap;             /* the power management capability's offset */
    QEMUTimer *tick;        /* QEMU_CLOCK_VIRTUAL, when tick_ns; or NULL */
    int64_t next_tick;      /* its deadline: the last one plus the answer */

    char *socket;
    uint16_t device_id;
    uint32_t user_bar_size;
    uint32_t msix_vectors;
    uint32_t msi_vectors;
    bool bar64;
    uint64_t tick_ns;
};

static void xdma_model_lost(XdmaModelState *s, const char *what)
{
    if (!s->gone) {
        error_report("xdma-model: %s: model connection lost: the device "
                     "reads as removed from now on", what);
        s->gone = true;
        s->intx_level = false;
        pci_set_irq(PCI_DEVICE(s), 0);
    }
}

static bool xdma_model_send(XdmaModelState *s, uint8_t op, uint8_t bar,
                            uint8_t size, uint64_t addr, uint64_t data)
{
    uint8_t req[24] = { op, bar, size };

    if (s->gone) {
        return false;
    }
    stq_le_p(req + 8, addr);
    stq_le_p(req + 16, data);
    if (qemu_write_full(s->req_fd, req, sizeof(req)) != sizeof(req)) {
        xdma_model_lost(s, "write");
        return false;
    }
    return true;
}

static void xdma_model_irq_drain(XdmaModelState *s);

/*
 * Waits for the model's answer on the request connection. Meanwhile the
 * model may need a translation to finish the DMA it is doing, which holds
 * up its answer: serve the interrupt connection while waiting. (Requests
 * are small and the model reads them at once, so a send never waits long
 * with the BQL held.)
 */
static bool xdma_model_wait_answer(XdmaModelState *s)
{
    struct pollfd fds[2] = {
        { .fd = s->req_fd, .events = POLLIN },
        { .fd = s->irq_fd, .events = POLLIN },
    };
    int64_t deadline = qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
                       XDMA_MODEL_TIMEOUT_S * 1000;
    int64_t left;

    int n;

    while (!s->gone) {
        left = deadline - qemu_clock_get_ms(QEMU_CLOCK_REALTIME);
        fds[0].revents = fds[1].revents = 0;
        n = left > 0 ? poll(fds, 2, left) : 0;
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            xdma_model_lost(s, n ? strerror(errno) : "read timed out");
            return false;
        }
        if (fds[1].revents) {
            xdma_model_irq_drain(s);
        }
        if (fds[0].revents) {
            return true;
        }
    }
    return false;
}

static bool xdma_model_recv(XdmaModelState *s, void *buf, size_t len)
{
    uint8_t *p = buf;
    ssize_t n;

    while (len) {
        if (!xdma_model_wait_answer(s)) {
            return false;
        }
        n = read(s->req_fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            xdma_model_lost(s, n < 0 && errno == EAGAIN ? "read timed out"
                                                         : "read");
            return false;
        }
        p += n;
        len -= n;
    }
    return true;
}

static int xdma_model_mode(XdmaModelState *s)
{
    PCIDevice *pdev = PCI_DEVICE(s);

    if (msix_enabled(pdev)) {
        return MODE_MSIX;
    }
    if (msi_enabled(pdev)) {
        return MODE_MSI;
    }
    return MODE_INTX;
}

/* INTx follows the model's level only while neither MSI kind is on. */
static void xdma_model_update_intx(XdmaModelState *s)
{
    pci_set_irq(PCI_DEVICE(s), s->mode == MODE_INTX && s->intx_level);
}

static void xdma_model_irq(XdmaModelState *s, uint8_t kind, uint32_t value)
{
    PCIDevice *pdev = PCI_DEVICE(s);

    switch (kind) {
    case IRQ_EDGE:
        if (s->mode == MODE_MSIX) {
            if (value < s->msix_vectors) {
                msix_notify(pdev, value);
            }
        } else if (s->mode == MODE_MSI) {
            /* Multiple Message: the low bits the OS granted. */
            msi_notify(pdev, value & (msi_nr_vectors_allocated(pdev) - 1));
        }
        break;
    case IRQ_LEVEL:
        s->intx_level = value;
        xdma_model_update_intx(s);
        break;
    default:
        error_report("xdma-model: unknown interrupt message %u", kind);
    }
}

/*
 * Writes an answer on the non-blocking interrupt connection; the model
 * reads it at once, so waiting for room is brief.
 */
static bool xdma_model_irq_write(XdmaModelState *s, const uint8_t *buf,
                                 size_t len)
{
    struct pollfd pfd = { .fd = s->irq_fd, .events = POLLOUT };
    ssize_t n;
    int r;

    while (len) {
        n = write(s->irq_fd, buf, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            do {
                r = poll(&pfd, 1, XDMA_MODEL_TIMEOUT_S * 1000);
            } while (r < 0 && errno == EINTR);
            if (r > 0) {
                continue;
            }
        }
        if (n <= 0) {
            return false;
        }
        buf += n;
        len -= n;
    }
    return true;
}

/* Answers a translation request: what DMA to addr reaches. */
static void xdma_model_translate(XdmaModelState *s, bool is_write,
                                 uint32_t len, uint64_t addr)
{
    AddressSpace *as = pci_get_address_space(PCI_DEVICE(s));
    uint8_t rsp[XDMA_TRANSLATE_LEN] = { 0 };
    const char *name;
    MemoryRegion *mr;
    hwaddr xlat, plen = len;

    WITH_RCU_READ_LOCK_GUARD() {
        mr = address_space_translate(as, addr, &xlat, &plen, is_write,
                                     MEMTXATTRS_UNSPECIFIED);
        name = memory_region_is_ram(mr) ? memory_region_name(mr) : "";
        if (!strcmp(name, "ram0")) {
            rsp[1] = REGION_RAM;
        } else if (!strcmp(name, "vram")) {
            rsp[1] = REGION_VRAM;
        }
    }
    if (rsp[1] && plen) {
        rsp[0] = 1;
        stl_le_p(rsp + 4, plen);
        stq_le_p(rsp + 8, xlat);
    }
    if (!xdma_model_irq_write(s, rsp, sizeof(rsp))) {
        xdma_model_lost(s, "translation");
    }
}

static unsigned xdma_model_msg_len(XdmaModelState *s)
{
    if (s->irq_have < XDMA_MSG_LEN || s->irq_buf[0] != MSG_TRANSLATE) {
        return XDMA_MSG_LEN;
    }
    return XDMA_TRANSLATE_LEN;
}

static void xdma_model_msg(XdmaModelState *s)
{
    uint8_t *m = s->irq_buf;

    if (m[0] == MSG_TRANSLATE) {
        xdma_model_translate(s, m[1], ldl_le_p(m + 4), ldq_le_p(m + 8));
    } else {
        xdma_model_irq(s, m[0], ldl_le_p(m + 4));
    }
}

/*
 * Applies every interrupt message the model has sent so far, and answers
 * its translation requests. With the BQL held: from the main loop, and
 * while a read waits for its value.
 */
static void xdma_model_irq_drain(XdmaModelState *s)
{
    ssize_t n;

    while (!s->gone) {
        n = read(s->irq_fd, s->irq_buf + s->irq_have,
                 xdma_model_msg_len(s) - s->irq_have);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return;
        }
        if (n <= 0) {
            qemu_set_fd_handler(s->irq_fd, NULL, NULL, NULL);
            xdma_model_lost(s, "interrupts");
            return;
        }
        s->irq_have += n;
        if (s->irq_have == xdma_model_msg_len(s)) {
            xdma_model_msg(s);
            s->irq_have = 0;
        }
    }
}

static void xdma_model_irq_readable(void *opaque)
{
    xdma_model_irq_drain(opaque);
}

static uint64_t xdma_bar_read(void *opaque, hwaddr addr, unsigned size)
{
    XdmaBar *bar = opaque;
    XdmaModelState *s = bar->s;
    uint8_t rsp[8];

    if (!xdma_model_send(s, OP_READ, bar->index, size, addr, 0) ||
        !xdma_model_recv(s, rsp, sizeof(rsp))) {
        return ~0ULL >> (64 - 8 * size);
    }
    if (!s->gone) {
        xdma_model_irq_drain(s);
    }
    return ldq_le_p(rsp);
}

static void xdma_bar_write(void *opaque, hwaddr addr, uint64_t val,
                           unsigned size)
{
    XdmaBar *bar = opaque;

    xdma_model_send(bar->s, OP_WRITE, bar->index, size, addr, val);
}

/*
 * The model's clock, tied to the guest's: the model runs the card up to
 * the virtual time sent and answers, with the BQL held, once it has. Its
 * interrupts arrive before the answer and are applied here. The answer
 * says when the model needs the next tick (a card with nothing to run
 * asks for fewer); deadlines follow from the last deadline, whenever the
 * timer ran, so they depend on the virtual clock alone.
 */
static void xdma_model_tick(void *opaque)
{
    XdmaModelState *s = opaque;
    uint8_t rsp[8];
    uint64_t next;

    if (!xdma_model_send(s, OP_TICK, 0, 0, 0,
                         qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL)) ||
        !xdma_model_recv(s, rsp, sizeof(rsp))) {
        return;
    }
    xdma_model_irq_drain(s);
    next = ldq_le_p(rsp);
    if (next > XDMA_TICK_MAX_NS) {
        xdma_model_lost(s, "tick answer out of range");
    }
    if (!s->gone) {
        s->next_tick += next ? next : s->tick_ns;
        timer_mod(s->tick, s->next_tick);
    }
}

static const MemoryRegionOps xdma_bar_ops = {
    .read = xdma_bar_read,
    .write = xdma_bar_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = {
        .min_access_size = 4,
        .max_access_size = 8,
    },
    .impl = {
        .min_access_size = 4,
        .max_access_size = 8,
    },
};

/* Tells the model whether the function may master the bus. */
static void xdma_model_update_master(XdmaModelState *s)
{
    bool master = pci_get_word(PCI_DEVICE(s)->config + PCI_COMMAND) &
                  PCI_COMMAND_MASTER;

    if (master != s->master) {
        s->master = master;
        xdma_model_send(s, OP_MASTER, 0, 0, 0, master);
    }
}

static void xdma_model_write_config(PCIDevice *pdev, uint32_t addr,
                                    uint32_t val, int len)
{
    XdmaModelState *s = XDMA_MODEL(pdev);
    uint16_t was = pci_get_word(pdev->config + s->pm_cap + PCI_PM_CTRL);
    uint16_t now;
    int mode;

    pci_default_write_config(pdev, addr, val, len);
    xdma_model_update_master(s);
    /* A function-level reset resets the device (xdma_model_reset). */
    pcie_cap_flr_write_config(pdev, addr, val, len);
    pcie_aer_write_config(pdev, addr, val, len);
    /*
     * D3hot to D0 with No_Soft_Reset clear is an internal reset: the
     * function's configuration and the engine's registers are lost, and
     * the host restores what it saved.
     */
    now = pci_get_word(pdev->config + s->pm_cap + PCI_PM_CTRL);
    if ((was & PCI_PM_CTRL_STATE_MASK) == 3 && (now & PCI_PM_CTRL_STATE_MASK) == 0) {
        pci_device_reset(pdev);
    }
    if (msix_present(pdev)) {
        msix_write_config(pdev, addr, val, len);
    }
    if (msi_present(pdev)) {
        msi_write_config(pdev, addr, val, len);
    }
    mode = xdma_model_mode(s);
    if (mode != s->mode) {
        s->mode = mode;
        xdma_model_update_intx(s);
        xdma_model_send(s, OP_MODE, 0, 0, 0, mode);
    }
}

static int xdma_model_connect(XdmaModelState *s, uint8_t role, Error **errp)
{
    static const char magic[7] = "XDMAMDL";
    uint8_t hello[8];
    int fd;

    fd = unix_connect(s->socket, errp);
    if (fd < 0) {
        return -1;
    }
    memcpy(hello, magic, sizeof(magic));
    hello[7] = role;
    if (qemu_write_full(fd, hello, sizeof(hello)) != sizeof(hello)) {
        error_setg_errno(errp, errno, "xdma-model: hello to %s", s->socket);
        close(fd);
        return -1;
    }
    return fd;
}

static void xdma_model_realize(PCIDevice *pdev, Error **errp)
{
    XdmaModelState *s = XDMA_MODEL(pdev);
    uint8_t type = PCI_BASE_ADDRESS_SPACE_MEMORY;
    int dma_bar = 0;

    if (!s->socket) {
        error_setg(errp, "xdma-model: socket is required");
        return;
    }
    if (s->msix_vectors > XDMA_MAX_VECTORS ||
        s->msi_vectors > XDMA_MAX_VECTORS ||
        (s->msi_vectors & (s->msi_vectors - 1))) {
        error_setg(errp, "xdma-model: at most %d MSI-X vectors, and a power "
                   "of two of at most %d MSI vectors", XDMA_MAX_VECTORS,
                   XDMA_MAX_VECTORS);
        return;
    }
    if (s->tick_ns > XDMA_TICK_MAX_NS) {
        error_setg(errp, "xdma-model: tick-ns must be at most %d",
                   XDMA_TICK_MAX_NS);
        return;
    }
    if (s->user_bar_size && (s->user_bar_size < 4096 ||
                             (s->user_bar_size & (s->user_bar_size - 1)))) {
        error_setg(errp, "xdma-model: user-bar-size must be a power of two "
                   "of at least 4096");
        return;
    }
    if (s->bar64) {
        type |= PCI_BASE_ADDRESS_MEM_TYPE_64;
    }

    pci_config_set_device_id(pdev->config, s->device_id);
    pci_config_set_interrupt_pin(pdev->config, 1);

    s->req_fd = xdma_model_connect(s, 0, errp);
    if (s->req_fd < 0) {
        return;
    }
    {
        struct timeval tv = { .tv_sec = XDMA_MODEL_TIMEOUT_S };

        setsockopt(s->req_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    s->irq_fd = xdma_model_connect(s, 1, errp);
    if (s->irq_fd < 0) {
        goto err_req;
    }
    qemu_socket_set_nonblock(s->irq_fd);
    qemu_set_fd_handler(s->irq_fd, xdma_model_irq_readable, NULL, s);

    /* PG195: with the AXI-Lite master, it is BAR0 and the DMA BAR follows. */
    if (s->user_bar_size) {
        s->user.s = s;
        s->user.index = 1;
        memory_region_init_io(&s->user.mr, OBJECT(s), &xdma_bar_ops, &s->user,
                              "xdma-model-user", s->user_bar_size);
        pci_register_bar(pdev, 0, type, &s->user.mr);
        dma_bar = s->bar64 ? 2 : 1;
    }
    s->dma.s = s;
    s->dma.index = 0;
    memory_region_init_io(&s->dma.mr, OBJECT(s), &xdma_bar_ops, &s->dma,
                          "xdma-model-dma", XDMA_DMA_BAR_SIZE);
    pci_register_bar(pdev, dma_bar, type, &s->dma.mr);

    if (pcie_endpoint_cap_init(pdev, 0) < 0) {
        error_setg(errp, "xdma-model: PCIe capability");
        goto err_irq;
    }
    /* Error reporting enables in Device Control, as every function has. */
    pcie_cap_deverr_init(pdev);
    /* Enable Relaxed Ordering: RW, 1 at reset (PCIe base spec, 7.5.3.4). */
    pci_word_test_and_set_mask(pdev->wmask + pdev->exp.exp_cap + PCI_EXP_DEVCTL,
                               PCI_EXP_DEVCTL_RELAX_EN);
    pcie_cap_flr_init(pdev);
    s->pm_cap = pci_add_capability(pdev, PCI_CAP_ID_PM, 0, PCI_PM_SIZEOF, errp);
    if (s->pm_cap < 0) {
        goto err_irq;
    }
    /* PM 1.2, D0 and D3hot only; No_Soft_Reset (PMCSR bit 3) clear. */
    pci_set_word(pdev->config + s->pm_cap + PCI_PM_PMC, 3);
    pci_set_word(pdev->wmask + s->pm_cap + PCI_PM_CTRL, PCI_PM_CTRL_STATE_MASK);
    if (s->msi_vectors &&
        msi_init(pdev, 0, s->msi_vectors, true, false, errp) < 0) {
        goto err_irq;
    }
    if (s->msix_vectors) {
        if (msix_init(pdev, s->msix_vectors, &s->dma.mr, dma_bar,
                      XDMA_MSIX_TABLE, &s->dma.mr, dma_bar, XDMA_MSIX_PBA,
                      0, errp) < 0) {
            goto err_msi;
        }
        for (unsigned i = 0; i < s->msix_vectors; i++) {
            msix_vector_use(pdev, i);
        }
    }
    if (pcie_aer_init(pdev, PCI_ERR_VER, PCI_CONFIG_SPACE_SIZE, PCI_ERR_SIZEOF, errp) < 0) {
        goto err_msix;
    }
    s->mode = MODE_INTX;
    if (s->tick_ns) {
        s->tick = timer_new_ns(QEMU_CLOCK_VIRTUAL, xdma_model_tick, s);
        s->next_tick = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + s->tick_ns;
        timer_mod(s->tick, s->next_tick);
    }
    return;

err_msix:
    if (msix_present(pdev)) {
        msix_unuse_all_vectors(pdev);
        msix_uninit(pdev, &s->dma.mr, &s->dma.mr);
    }
err_msi:
    msi_uninit(pdev);
err_irq:
    qemu_set_fd_handler(s->irq_fd, NULL, NULL, NULL);
    close(s->irq_fd);
err_req:
    close(s->req_fd);
}

static void xdma_model_exit(PCIDevice *pdev)
{
    XdmaModelState *s = XDMA_MODEL(pdev);

    if (s->tick) {
        timer_free(s->tick);
        s->tick = NULL;
    }
    pcie_aer_exit(pdev);
    if (msix_present(pdev)) {
        msix_unuse_all_vectors(pdev);
        msix_uninit(pdev, &s->dma.mr, &s->dma.mr);
    }
    msi_uninit(pdev);
    qemu_set_fd_handler(s->irq_fd, NULL, NULL, NULL);
    close(s->irq_fd);
    close(s->req_fd);
}

static void xdma_model_reset(DeviceState *dev)
{
    XdmaModelState *s = XDMA_MODEL(dev);
    PCIDevice *pdev = PCI_DEVICE(dev);

    if (msix_present(pdev)) {
        msix_reset(pdev);
    }
    if (msi_present(pdev)) {
        msi_reset(pdev);
    }
    pcie_cap_deverr_reset(pdev);
    pci_word_test_and_set_mask(pdev->config + pdev->exp.exp_cap + PCI_EXP_DEVCTL,
                               PCI_EXP_DEVCTL_RELAX_EN);
    s->mode = MODE_INTX;
    s->intx_level = false;
    s->master = false;
    pci_set_irq(pdev, 0);
    xdma_model_send(s, OP_RESET, 0, 0, 0, 0);
}

/* The model's state lives in another process: nothing to migrate. */
static const VMStateDescription vmstate_xdma_model = {
    .name = TYPE_XDMA_MODEL,
    .unmigratable = 1,
};

static Property xdma_model_properties[] = {
    DEFINE_PROP_STRING("socket", XdmaModelState, socket),
    DEFINE_PROP_UINT16("device-id", XdmaModelState, device_id, 0x9038),
    DEFINE_PROP_UINT32("user-bar-size", XdmaModelState, user_bar_size, 0),
    DEFINE_PROP_UINT32("msix-vectors", XdmaModelState, msix_vectors, 32),
    DEFINE_PROP_UINT32("msi-vectors", XdmaModelState, msi_vectors, 32),
    DEFINE_PROP_BOOL("bar64", XdmaModelState, bar64, false),
    /* 0: the model runs on its own time (free-running). */
    DEFINE_PROP_UINT64("tick-ns", XdmaModelState, tick_ns, 0),
    DEFINE_PROP_END_OF_LIST(),
};

static void xdma_model_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    PCIDeviceClass *k = PCI_DEVICE_CLASS(klass);

    k->realize = xdma_model_realize;
    k->exit = xdma_model_exit;
    k->config_write = xdma_model_write_config;
    k->vendor_id = 0x10ee;          /* Xilinx */
    k->device_id = 0x9038;
    /* Not 0x0700: 8250_pci claims serial-class functions. */
    k->class_id = PCI_CLASS_MEMORY_OTHER;
    dc->reset = xdma_model_reset;
    dc->vmsd = &vmstate_xdma_model;
    dc->desc = "XDMA engine served by an outside device model";
    device_class_set_props(dc, xdma_model_properties);
    set_bit(DEVICE_CATEGORY_MISC, dc->categories);
}

static const TypeInfo xdma_model_info = {
    .name = TYPE_XDMA_MODEL,
    .parent = TYPE_PCI_DEVICE,
    .instance_size = sizeof(XdmaModelState),
    .class_init = xdma_model_class_init,
    .interfaces = (InterfaceInfo[]) {
        { INTERFACE_PCIE_DEVICE },
        { },
    },
};

static void xdma_model_register_types(void)
{
    type_register_static(&xdma_model_info);
}

type_init(xdma_model_register_types)
