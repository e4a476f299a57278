/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gpufpga internals.
 *
 * Lock order, outermost first:
 *   gpufpga_dev.ioctl_rwsem     ioctls (read) against device removal (write)
 *   gpufpga_dev.files_lock      the device's open files
 *   gpufpga_dev.lifecycle_lock  resets and sleeps under way (mutex)
 *   gpufpga_file.lock (mutex)   the file's pins and async requests
 *   NVIDIA's own locks          held by NVIDIA around its free callback
 *   gpufpga_chan.mutex          halting the channel's engine (may sleep)
 *   gpufpga_chan.build_mutex    writing the channel's spare ring
 *   gpufpga_mem.lock (spinlock) a pin's state; never taken in IRQ
 *   gpufpga_chan.lock           the channel's running and queued requests
 *                               (spinlock, taken in the hard IRQ handler)
 *   gpufpga_file.pending        its xarray lock (IRQ-safe)
 *   gpufpga_file.done_lock      finished async requests (spinlock, leaf)
 * Completions run in the hard IRQ handler under chan.lock; nothing under
 * chan.lock sleeps, and the handler's work does not grow with a chain's
 * length when it completes: chains are built in process context, under
 * build_mutex (a failed chain's bytes, and a stream channel's packets, are
 * counted per descriptor done).
 * Whatever must wait for the engine (a halt, a revoked transfer's last
 * bytes) holds chan.mutex and sets chan.halting, which keeps the IRQ
 * handler off the channel, then drops chan.lock to wait.
 * The NVIDIA free callback and dma-buf move_notify run under their
 * provider's locks and take chan.mutex, chan.lock and mem.lock only.
 * NVIDIA's entry points are called with no lock held but files_lock (remove
 * unpinning open files): never with file.lock, chan.mutex, chan.lock or
 * mem.lock.
 */
#ifndef GPUFPGA_H
#define GPUFPGA_H

#include <linux/completion.h>
#include <linux/dma-buf.h>
#include <linux/eventfd.h>
#include <linux/idr.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/pci.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

/* The consumer's 64-bit count is read in one access (stream.c). */
#ifndef CONFIG_64BIT
#error "gpufpga needs a 64-bit kernel"
#endif

#include "nv_ops.h"
#include "uapi/gpufpga.h"
#include "xdma_regs.h"

#define GPUFPGA_GPU_PAGE	SZ_64K
#define GPUFPGA_INLINE_SEGS	4	/* segments a request holds in itself */
/* What a register of a function off the bus reads. */
#define GPUFPGA_DEAD		0xffffffff
/* A vector per channel, then one per user interrupt line where given. */
#define GPUFPGA_MAX_VECS	(2 * GPUFPGA_MAX_CHANNELS + GPUFPGA_USER_IRQS)
/* Requests ended per hold of a channel's lock, interrupts off. */
#define GPUFPGA_FINISH_BATCH	16
/*
 * A completed count that lags its chain's stop is looked at again after
 * 1 << looks jiffies, looks growing to this.
 */
#define GPUFPGA_STALE_LOOKS	6

/* params.c */
extern unsigned int gpufpga_max_descs;
extern unsigned int gpufpga_max_segs;
extern unsigned int gpufpga_max_pins;
extern unsigned long gpufpga_max_pinned;
extern unsigned long gpufpga_max_pinned_total;
extern unsigned int gpufpga_timeout_ms;
extern unsigned int gpufpga_revoke_wait_ms;
extern unsigned int gpufpga_max_queued;
extern unsigned int gpufpga_resident_poll_us;
extern unsigned long gpufpga_card_mem_size;
extern bool gpufpga_nv_revocable_pins;

struct gpufpga_dev;

struct gpufpga_req;
struct gpufpga_stream_state;

/* A record waiting for read(): a finished transfer or a stream event. */
struct gpufpga_event {
	struct list_head node;		/* file->done */
	struct gpufpga_req *req;	/* its transfer, or NULL */
	struct gpufpga_event_block *block;	/* its stream slot's, or NULL */
	/*
	 * A slot's record is in file->done: set by the IRQ handler that
	 * posts it, cleared (release) once read() or a drain let it go.
	 */
	bool queued;
	struct gpufpga_completion rec;
};

/*
 * A stream's slot records, one per slot, allocated when it starts, so that
 * the IRQ handler allocates nothing. A slot fills again only once its
 * record is read (a client learns of the fill from it before releasing the
 * slot), so one each is enough; a client that releases slots blind finds
 * its stream ended with -EOVERFLOW. Every queued record holds a reference:
 * records outlive their stream until they are read.
 */
struct gpufpga_event_block {
	struct kref ref;
	u32 n;
	struct gpufpga_event ev[];
};

/*
 * Whether the page at @next follows the page of @size bytes at @prev on the
 * bus; the top page of the address space is not followed by page 0.
 */
static inline bool gpufpga_bus_follows(dma_addr_t prev, dma_addr_t next, u64 size)
{
	dma_addr_t end;

	return !check_add_overflow(prev, (dma_addr_t)size, &end) && end == next;
}

/* read() hands out records of exactly this size in ABI 1. */
static_assert(sizeof(struct gpufpga_completion) == 112);

/*
 * One of a channel's two descriptor rings: descriptors, then one C2H stream
 * result record per descriptor. A chain is built into the ring the engine
 * does not run (the spare), in process context, so that starting it from
 * the IRQ handler costs a few register writes whatever its length.
 */
struct gpufpga_ring {
	void *desc;
	dma_addr_t bus;
	u32 count;		/* descriptors of the chain it holds */
	u32 first_adj;		/* the adjacent count of its first */
};

struct gpufpga_chan;
struct gpufpga_file;
struct gpufpga_mem;

/*
 * A user of a channel's engine: transfers (always there) or a stream
 * (while it runs). The engine calls the one that runs it, and never the
 * other way up.
 */
struct gpufpga_chan_user {
	/* Hard IRQ or a poller, ch->lock held: every status bit seen. */
	void (*irq)(struct gpufpga_chan *ch, u32 seen);
	/* The watchdog fired. ch->mutex held, ch->lock not. */
	void (*watchdog)(struct gpufpga_chan *ch);
	/* Whether its work uses m. ch->lock held. */
	bool (*uses)(struct gpufpga_chan *ch, struct gpufpga_mem *m);
	/* Ends its work on m (m NULL: all of it, or f's) with error. ch->mutex held. */
	void (*stop)(struct gpufpga_chan *ch, struct gpufpga_file *f, struct gpufpga_mem *m,
		     int error, unsigned long until);
};

struct gpufpga_chan {
	struct gpufpga_dev *dev;
	u8 dir;
	u8 index;
	bool present;
	bool stream;
	u32 irq_bit;
	/* From the ALIGNMENTS register: what the engine can address. */
	u32 addr_align;		/* bytes; 1: any address */
	u32 len_gran;		/* bytes; 1: any length */

	struct mutex mutex;		/* halting the engine; outside lock */
	/*
	 * Writing a ring no chain runs from: the spare one, or the idle
	 * channel's last. Its holder is the only writer of either; only it
	 * changes cur (by starting a chain it built, or letting the IRQ
	 * handler start one marked ready, under lock).
	 */
	struct mutex build_mutex;
	struct work_struct build_work;	/* builds the next queued chain */
	spinlock_t lock;		/* all below */
	struct gpufpga_ring rings[2];
	u32 cur;			/* the ring the engine runs, or ran last */
	const struct gpufpga_chan_user *user;	/* running the engine now */
	const struct gpufpga_chan_user *idle_user;	/* when no stream runs */
	struct gpufpga_req *active;
	u64 runs;			/* chains started: names the active one */
	struct list_head queue;
	struct gpufpga_stream_state *acq;	/* a running stream, or NULL */
	bool halting;			/* mutex holder owns the engine */
	bool quiet;			/* interrupt off, for polled chains */
	bool credit_mode;		/* a stream's: credits bound fetches */
	u32 int_enable;			/* the channel's interrupt enable bits */
	/*
	 * Read-to-clear status bits of the running chain, from every read
	 * since it started (gpufpga_chan_status): none is lost. Under lock,
	 * or mutex while halting, or where no chain runs (probe, shutdown).
	 */
	u32 status_seen;
	bool stop_may_be_stale;		/* the last chain's stop was not read */
	u8 stale_looks;			/* looks at a count lagging its stop */
	bool stopping;			/* gpufpga_finish_queued walks the queue */
	int acq_error;			/* the stream must end with it */
	/* Watchdog: a lost interrupt, a timeout, a stream that must end. */
	struct delayed_work work;
	unsigned long deadline;

	size_t ring_size;		/* bytes of each ring */
	__le32 *wb;			/* the poll-mode writeback word */
	dma_addr_t wb_bus;

	u64 xfers;
	u64 bytes;
	u64 errors;
	u64 timeouts;
	u64 revoked;
	u32 last_status;
};

/* The stream results of the ring r, one per descriptor. */
static inline struct xdma_result *gpufpga_ring_results(struct gpufpga_ring *r)
{
	return r->desc + (size_t)gpufpga_max_descs * XDMA_DESC_SIZE;
}

/* An interrupt vector's cookie. */
struct gpufpga_vec {
	struct gpufpga_dev *dev;
	int index;
};

struct gpufpga_dev {
	struct kref ref;
	struct pci_dev *pdev;
	int id;
	char name[24];
	struct miscdevice misc;

	void __iomem *bar;		/* the DMA BAR: the engine's registers */
	int bar_index;			/* its number: sysfs dma_bar */
	/* Each read and written with READ_ONCE/WRITE_ONCE: no lock covers them. */
	bool link_down;
	bool dead;
	/*
	 * The driver cut bus mastering (gpufpga_dev_cut_bus) and has not
	 * enabled it since: no engine reaches memory. The driver's own
	 * record: pci_restore_state() does not update pdev->is_busmaster.
	 */
	bool bus_off;
	/*
	 * A reset, an error recovery or a system sleep is under way: new
	 * work is refused (resetting), and the registers, which may not
	 * answer or will lose their values, are left alone (offline).
	 */
	bool resetting;
	bool offline;
	/*
	 * Events under way that took the function (a sysfs reset may come
	 * inside an AER recovery): the last one's restart brings it back.
	 */
	struct mutex lifecycle_lock;	/* quiesced, resetting's setting */
	int quiesced;
	/*
	 * An AER recovery quiesced the function and its resume has not come;
	 * under the device lock, which the PCI core holds around each error
	 * handler.
	 */
	bool aer_held;
	u32 resets;			/* reprogrammed after an event, WRITE_ONCE */
	u32 errors;			/* AER errors reported, WRITE_ONCE */
	/* Removed, and every record it will post queued: read() ends. */
	bool gone;
	/* Held for reading by every ioctl; remove takes it to wait them out. */
	struct rw_semaphore ioctl_rwsem;

	u32 ip_version;
	u32 addr_bits;		/* the narrowest channel's */
	int nchan[2];
	struct gpufpga_chan chan[2][GPUFPGA_MAX_CHANNELS];
	int nvecs;
	const char *irq_kind;		/* "MSI-X", "MSI" or "INTx" */
	bool intx;			/* a shared line: check the pending bits */
	u32 irq_enabled;		/* channel interrupt bits set up */
	u32 chan_vectors[2];		/* the IRQ block's channel vector map */
	int chan_nvecs;			/* the vectors channels are spread over */
	struct gpufpga_vec vecs[GPUFPGA_MAX_VECS];

	/*
	 * User interrupts (usr_irq_req): line n has vector user_vec + n when
	 * user_own, else all share vector 0 and the request register says
	 * which fired. user_lock covers user_armed (the lines enabled in the
	 * IP), user_counts and every file's user_seen; user_wq wakes waiters.
	 */
	bool user_own;
	int user_vec;
	spinlock_t user_lock;		/* user_armed, user_counts, user_seen */
	u32 user_armed;
	u64 user_counts[GPUFPGA_USER_IRQS];
	wait_queue_head_t user_wq;

	/* Resident streams running, and whether they turned relaxed ordering off. */
	spinlock_t devctl_lock;		/* resident_streams, relaxed_off, Device Control */
	unsigned int resident_streams;
	bool relaxed_off;

	atomic64_t pinned_total;
	struct mutex files_lock;	/* files */
	struct list_head files;
	struct dentry *debugfs;
};

/* The next present channel after flat index *i (H2C first), or NULL. */
static inline struct gpufpga_chan *gpufpga_chan_next(struct gpufpga_dev *dev, int *i)
{
	struct gpufpga_chan *ch;

	while (++*i < 2 * GPUFPGA_MAX_CHANNELS) {
		ch = &dev->chan[*i / GPUFPGA_MAX_CHANNELS][*i % GPUFPGA_MAX_CHANNELS];
		if (ch->present)
			return ch;
	}
	return NULL;
}

/* Iterates over the channels the device has; i is the cursor. */
#define gpufpga_for_each_chan(dev, ch, i)				\
	for ((i) = -1; ((ch) = gpufpga_chan_next(dev, &(i))); )

struct gpufpga_file {
	struct gpufpga_dev *dev;
	bool rawio;			/* the opener had CAP_SYS_RAWIO */
	struct mutex lock;		/* pins, next_handle, next_id, builds, pinned, npins */
	struct xarray pins;		/* handle -> pin */
	u64 next_handle;
	u64 next_id;
	u64 builds;			/* requests built: gpufpga_mem.stamp */
	u64 pinned;
	u32 npins;
	struct xarray pending;		/* id -> async request not yet finished */
	atomic_t nasync;		/* async requests not yet read */
	atomic_t nevents;		/* stream records not yet read */
	struct list_head node;		/* dev->files */

	spinlock_t done_lock;		/* done */
	struct list_head done;
	wait_queue_head_t done_wq;

	u64 user_seen[GPUFPGA_USER_IRQS];	/* dev->user_counts last told */
};

/* Pinned memory: what a pin handle names. */
enum gpufpga_mem_state {
	GPUFPGA_MEM_ACTIVE,
	GPUFPGA_MEM_REVOKING,
	GPUFPGA_MEM_REVOKED,
};

struct gpufpga_mem {
	struct kref ref;
	struct gpufpga_dev *dev;
	u64 handle;
	u32 kind;
	u32 flags;
	u64 addr;
	u64 len;
	u64 offset;		/* of addr in the first page */
	u32 page_size;
	u32 npages;
	u32 nruns;
	u32 largest_run;
	dma_addr_t *bus;	/* bus address of each page */
	u64 stamp;		/* the file's last request built with it (file lock) */

	spinlock_t lock;		/* state, nv.pt, nv.map, nv.freed */
	enum gpufpga_mem_state state;
	bool published;		/* in the file's table */
	atomic_t inflight;
	/*
	 * Transfers built with it for each channel and not yet ended: what a
	 * revoke asks (gpufpga_xfer_uses) without a walk of the queue.
	 */
	atomic_t xfers[2][GPUFPGA_MAX_CHANNELS];

	union {
		struct {
			const struct gpufpga_nv_ops *ops;
			struct nvidia_p2p_page_table *pt;
			struct nvidia_p2p_dma_mapping *map;
			u64 va;
			u8 gpu_uuid[16];	/* the GPU's, from the page table */
			bool freed;	/* by NVIDIA, after the free callback (lock) */
			/* Unpinned, put_pages refused: the callback frees (lock). */
			bool orphaned;
			struct completion callback_done;
		} nv;
		struct {
			struct page **pages;
			struct sg_table sgt;
			struct mm_struct *mm;	/* charged for the pages */
		} host;
		struct {
			struct dma_buf *buf;
			struct dma_buf_attachment *att;
			struct sg_table *sgt;
		} dmabuf;
	};
};

/* One contiguous piece of a transfer, on the bus. */
struct gpufpga_busseg {
	dma_addr_t addr;
	u32 len;
};

struct gpufpga_req {
	struct kref ref;
	struct gpufpga_file *file;
	struct gpufpga_chan *chan;
	u64 id;
	u64 user_data;
	bool async;
	bool poll;		/* the waiter spins on the writeback word */
	bool ready;		/* its chain is in the spare ring (ch->lock) */
	struct eventfd_ctx *efd;

	struct gpufpga_mem **mems;	/* one reference per pin it uses */
	u32 nmems;
	struct gpufpga_busseg *segs;
	u32 nsegs;
	/* Where a short transfer keeps them: no allocation per transfer. */
	struct gpufpga_mem *mem_inline[GPUFPGA_INLINE_SEGS];
	struct gpufpga_busseg seg_inline[GPUFPGA_INLINE_SEGS];
	u64 card_addr;
	u64 total;
	unsigned long timeout;

	/* Results. */
	u64 bytes;
	u32 status;
	int error;
	u64 start_ns;
	u64 duration_ns;
	bool finished;
	struct completion done;

	struct list_head chan_node;	/* chan->queue */
	struct gpufpga_event ev;	/* its completion record */
};

/* uaccess.c */
int gpufpga_copy_in(void *dst, size_t ksize, void __user *src, unsigned int usize,
		    size_t minsize);
int gpufpga_copy_out(void __user *dst, unsigned int usize, const void *src,
		     size_t ksize);

/* dev.c */
extern struct workqueue_struct *gpufpga_wq;
extern struct ida gpufpga_ida;
void gpufpga_dev_release(struct kref *ref);

/* regs.c */
u32 gpufpga_read(struct gpufpga_dev *dev, u32 off);
void gpufpga_write(struct gpufpga_dev *dev, u32 off, u32 val);
int gpufpga_regs_init(struct gpufpga_dev *dev);
bool gpufpga_answers(struct gpufpga_dev *dev);
u32 gpufpga_chan_reg(struct gpufpga_chan *ch, u32 reg);
int gpufpga_discover_channels(struct gpufpga_dev *dev);

/* user_irq.c */
void gpufpga_user_init(struct gpufpga_dev *dev);
void gpufpga_user_program(struct gpufpga_dev *dev);
void gpufpga_user_mask(struct gpufpga_dev *dev);
void gpufpga_user_disable(struct gpufpga_dev *dev);
bool gpufpga_user_irq(struct gpufpga_dev *dev, int index);
void gpufpga_user_open(struct gpufpga_file *f);
void gpufpga_user_wake(struct gpufpga_dev *dev);
int gpufpga_ioctl_user_irq(struct gpufpga_file *f, void __user *arg, unsigned int size);

/* engine.c */
int gpufpga_chan_halt(struct gpufpga_chan *ch, u32 *status);
void gpufpga_dev_cut_bus(struct gpufpga_dev *dev);
u32 gpufpga_chan_status(struct gpufpga_chan *ch);
int gpufpga_chan_init(struct gpufpga_chan *ch, const struct gpufpga_chan_user *user,
		      work_func_t build);
void gpufpga_chan_fini(struct gpufpga_chan *ch);
void gpufpga_chan_program(struct gpufpga_chan *ch, u32 credits);
void gpufpga_dev_program(struct gpufpga_dev *dev);
void gpufpga_dev_quiesce(struct gpufpga_dev *dev, bool frozen);
int gpufpga_dev_restart(struct gpufpga_dev *dev, bool *programmed);
void gpufpga_dev_abandon(struct gpufpga_dev *dev);
void gpufpga_chan_irq(struct gpufpga_chan *ch);
bool gpufpga_chan_own(struct gpufpga_chan *ch, struct gpufpga_req *r, u64 run);
void gpufpga_chan_release(struct gpufpga_chan *ch);
void gpufpga_chan_set_quiet(struct gpufpga_chan *ch, bool quiet);
struct gpufpga_ring *gpufpga_chan_spare(struct gpufpga_chan *ch);
struct gpufpga_ring *gpufpga_chan_idle_ring(struct gpufpga_chan *ch);
void gpufpga_chan_rerun(struct gpufpga_chan *ch, u32 control);
void gpufpga_chan_run(struct gpufpga_chan *ch, u32 control, u32 credits);
void gpufpga_chan_attach(struct gpufpga_chan *ch, const struct gpufpga_chan_user *user);
void gpufpga_chan_detach(struct gpufpga_chan *ch);
void gpufpga_chan_add_credits(struct gpufpga_chan *ch, u32 n);
u8 gpufpga_adjacent_after(dma_addr_t addr, u32 remaining);
void gpufpga_chan_stop_all(struct gpufpga_dev *dev, struct gpufpga_file *f,
			   struct gpufpga_mem *m, int error);

/* pin.c */
int gpufpga_ioctl_pin(struct gpufpga_file *f, void __user *arg, unsigned int size);
int gpufpga_ioctl_unpin(struct gpufpga_file *f, void __user *arg, unsigned int size);
int gpufpga_ioctl_query(struct gpufpga_file *f, void __user *arg, unsigned int size);
void gpufpga_unpin_all(struct gpufpga_file *f);
void gpufpga_mem_put(struct gpufpga_mem *m);
bool gpufpga_mem_active(struct gpufpga_mem *m);
u32 gpufpga_pin_kinds(void);

/* req.c */
void gpufpga_req_put(struct gpufpga_req *r);
int gpufpga_append_window(struct gpufpga_req *r, struct gpufpga_mem *m, u64 off, u64 len);
int gpufpga_append_window_limited(struct gpufpga_req *r, struct gpufpga_mem *m, u64 off,
				  u64 len, u32 max);
int gpufpga_check_alignment(const struct gpufpga_chan *ch, const struct gpufpga_busseg *segs,
			    u32 nsegs, u64 card);

/* event.c */
struct gpufpga_event_block *gpufpga_event_block_alloc(u32 n);
void gpufpga_event_block_put(struct gpufpga_event_block *b);
void gpufpga_post_event(struct gpufpga_file *f, struct gpufpga_event *ev,
			struct eventfd_ctx *efd);
void gpufpga_drain_completions(struct gpufpga_file *f);
ssize_t gpufpga_read_completions(struct gpufpga_file *f, char __user *buf,
				 size_t count, bool nonblock);

/* xfer.c */
int gpufpga_ioctl_xfer(struct gpufpga_file *f, void __user *arg, unsigned int size);
int gpufpga_ioctl_cancel(struct gpufpga_file *f, void __user *arg, unsigned int size);
int gpufpga_xfer_chan_init(struct gpufpga_chan *ch);

/* stream.c */
int gpufpga_ioctl_stream_start(struct gpufpga_file *f, void __user *arg, unsigned int size,
			       bool named);
int gpufpga_ioctl_stream_release(struct gpufpga_file *f, void __user *arg, unsigned int size);
int gpufpga_ioctl_stream_stop(struct gpufpga_file *f, void __user *arg, unsigned int size);

/* debugfs.c */
void gpufpga_debugfs_init(struct gpufpga_dev *dev);
void gpufpga_debugfs_exit(struct gpufpga_dev *dev);
void gpufpga_debugfs_module_init(void);
void gpufpga_debugfs_module_exit(void);

#endif /* GPUFPGA_H */
