// SPDX-License-Identifier: GPL-2.0
/*
 * nvp2p_sim - a simulated NVIDIA GPU for the gpufpga test rig.
 *
 * Binds to the QEMU ivshmem-plain device whose BAR2 carries the rig's VRAM
 * magic; that BAR plays the GPU's BAR1: PCI memory with no struct page.
 * Exports NVIDIA's third-party P2P API with NVIDIA's names, signatures and
 * structure layouts, enforcing its rules, and offers /dev/nvp2p_sim in place
 * of cudaMalloc/cudaFree, with mmap of allocations and dma-buf export.
 *
 * It is as strict as NVIDIA's nv-p2p.c, not kinder:
 * - Freeing an allocation revokes its callback pins: each free callback runs
 *   once, under the resource manager's API lock (sim_rm_lock, an
 *   rw_semaphore taken for writing, as rmapiLockAcquire takes NVIDIA's), so
 *   that lockdep sees every lock the callback takes nested inside it, and
 *   reports an inversion with a caller that holds one of those locks across
 *   get_pages, put_pages or dma_map_pages, which take it too. Right after
 *   the callback returns, the page table and its DMA mappings are freed.
 *   Only then are the pages marked free in the VRAM header, where the rig's
 *   device model checks every DMA write against them.
 * - dma_map_pages and dma_unmap_pages take no lock around the table they
 *   are given, as NVIDIA's do not: dma_map_pages reads its entries, then
 *   maps them under the API lock (rm_p2p_dma_map_pages), then links the
 *   mapping to the table under the table's own lock (NVIDIA's mem_info
 *   semaphore; a mutex here, which lockdep sees). A table freed under them
 *   is a use after free, as in NVIDIA's: KASAN catches it on the debug
 *   kernel, and the simulator's own check (a table kept poisoned in
 *   quarantine) elsewhere. dma_unmap_pages of a mapping already gone
 *   returns 0, as NVIDIA's.
 * - put_pages looks the table up: one whose free callback has run is gone,
 *   and put_pages returns 0 for it, as NVIDIA's. put_pages_fail makes it
 *   fail as NVIDIA's does when its resource manager refuses (-EIO, from
 *   NV_ERR_INVALID_STATE): the pin then stays registered, its table and
 *   mappings live, and a later free of the memory still runs its free
 *   callback with the caller's data.
 * - p2p_topology_ok=N makes dma_map_pages refuse the peer with -ENOTSUPP,
 *   as NVIDIA's does behind a PCI topology it does not support
 *   (nv_grdma_pci_topology_supported); get_pages still succeeds.
 * - free_in_get_pages fires the free callback before get_pages returns.
 * - Its dma-buf exports are nv-dmabuf.c's: static (no move_notify; the
 *   memory stays until the dma-buf is released), no CPU mmap (-ENOTSUPP),
 *   attachable by a dynamic importer only with allow_peer2peer, mapped for
 *   the importer through its DMA API (an IOMMU translating for it maps the
 *   BAR) in segments of at most its max_segment_size, or with CUDA's PCIe
 *   mapping type handed over as raw BAR addresses. A dynamic variant
 *   (no CUDA export) revokes its exports through move_notify when the
 *   allocation is freed, as exporters of memory that can go away must.
 * - dma_map_pages maps each page for the peer through its DMA API, as
 *   nv_dma_map_peer does.
 * - Built proprietary (the default, as most installed drivers are) it uses
 *   no GPL-only symbol and so, like NVIDIA's proprietary driver, exports no
 *   dma-bufs; NVP2P_SIM_OPEN builds the open variant, NVP2P_SIM_NO_PERSISTENT
 *   one without the persistent API, as drivers before it had.
 *
 * Locking, outermost first: sim->alloc_lock (mutex) serialises allocation
 * and free, and guards each allocation's list of exports (a dma-buf's
 * release takes it, from its last fput, never under a sim lock); a
 * dma-buf's reservation lock (taken under alloc_lock to revoke a dynamic
 * export; its map and unmap take no sim lock); sim_rm_lock (rw_semaphore)
 * is NVIDIA's resource manager API lock; a pin's maplock (mutex) its list
 * of DMA mappings; sim_peer_lock (mutex) the peer mappings of VRAM pages;
 * sim->lock (spinlock) protects the
 * allocation and pin lists, the free-page bitmap and the counters, and
 * nothing sleeps under it.
 */
#include <linux/bitmap.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "compat.h"
#include "gpufpga_nv_p2p.h"
#include "rig_layout.h"
#include "nvp2p_sim_uapi.h"

#define SIM_PAGE	SZ_64K
#define SIM_PAGE_SHIFT	16
#define SIM_VA_BASE	0x7f0000000000ULL
#define SIM_VA_ALIGN	SZ_2M

static unsigned int pt_major = 2;
module_param(pt_major, uint, 0444);
MODULE_PARM_DESC(pt_major, "page table version major to report (1 or 2)");

static unsigned int free_in_get_pages;
module_param(free_in_get_pages, uint, 0644);
MODULE_PARM_DESC(free_in_get_pages, "free the allocation (running the free callback) before each of the next N callback get_pages calls returns");

static unsigned long dma_offset;
module_param(dma_offset, ulong, 0644);
MODULE_PARM_DESC(dma_offset, "added (modulo 2^64) to every DMA address dma_map_pages hands out, as an IOMMU's IOVAs would move them: for tests of address ranges only, as DMA to them goes nowhere");

static bool dmabuf_topology_ok = true;
module_param(dmabuf_topology_ok, bool, 0644);
MODULE_PARM_DESC(dmabuf_topology_ok, "whether dma-buf attachments pass NVIDIA's PCI topology check (nv_grdma_pci_topology_supported); when not, attach fails with -ENOTSUPP as NVIDIA's does");

static unsigned int put_pages_fail;
module_param(put_pages_fail, uint, 0644);
MODULE_PARM_DESC(put_pages_fail, "fail each of the next N nvidia_p2p_put_pages calls of a live pin with -EIO, leaving the pin registered (its free callback still runs when the memory is freed), as NVIDIA's does when its resource manager refuses");

static bool p2p_topology_ok = true;
module_param(p2p_topology_ok, bool, 0644);
MODULE_PARM_DESC(p2p_topology_ok, "whether nvidia_p2p_dma_map_pages passes NVIDIA's PCI topology check (nv_grdma_pci_topology_supported); when not, it fails with -ENOTSUPP as NVIDIA's does");

static bool quarantine = !IS_ENABLED(CONFIG_KASAN);
module_param(quarantine, bool, 0444);
MODULE_PARM_DESC(quarantine, "keep freed page tables poisoned until unload, so that a later use is caught without KASAN");

/*
 * NVIDIA's resource manager API lock (g_RmApiLock, an rw_semaphore through
 * os_acquire_rwlock_write): free callbacks run under it.
 */
static DECLARE_RWSEM(sim_rm_lock);

/*
 * NV_ERR_NOT_SUPPORTED as nvidia_p2p_map_status returns it: the kernel's
 * internal "operation not supported" (524), which user space cannot name.
 */
#define SIM_NV_NOT_SUPPORTED	(-524)

#define SIM_PIN_LIVE	0x6e767032	/* "nvp2" */
#define SIM_PIN_DEAD	0x6b6b6b6b	/* slab's POISON_FREE */

struct sim_alloc {
	struct list_head node;		/* sim->allocs while the VA is live */
	struct kref ref;		/* the VA, persistent pins, dma-bufs */
	bool freed;			/* the VA is gone (alloc_lock) */
	struct file *owner;
	u64 va;
	u64 size;
	u32 npages;
	u32 *pages;			/* VRAM page index of each page */
	struct list_head dmabufs;	/* its exports (sim->alloc_lock) */
};

struct sim_mapping {
	struct list_head node;
	struct nvidia_p2p_dma_mapping map;
	u64 offset;			/* dma_offset when mapped */
	u32 *pages;			/* VRAM page index of each entry */
};

/*
 * A VRAM page mapped for a peer device. Each page is mapped once per device
 * and shared by every mapping of it that device holds: the DMA-API debug
 * code takes many mappings of one address for a leak, and a GPU page pinned
 * by several users is mapped that often. Guarded by sim_peer_lock, which is
 * taken last.
 */
struct sim_peer_page {
	struct hlist_node node;
	struct device *dev;
	u32 page;
	u32 refs;
	dma_addr_t addr;
};

static DEFINE_HASHTABLE(sim_peer_pages, 8);
static DEFINE_MUTEX(sim_peer_lock);

struct sim_pin {
	u32 magic;			/* SIM_PIN_LIVE until freed */
	struct list_head node;		/* sim->pins, then sim->quarantine */
	struct sim_alloc *alloc;
	u64 va;
	struct nvidia_p2p_page_table pt;
	struct nvidia_p2p_page *page_structs;
	struct mutex maplock;		/* mappings */
	struct list_head mappings;
	void (*free_callback)(void *data);
	void *data;
	bool persistent;
};

/*
 * An exported range. A static export (NVIDIA's) holds its allocation until
 * the dma-buf is released; a dynamic one gives it up when the allocation is
 * freed, after telling its importers through move_notify.
 */
struct sim_dmabuf {
	struct list_head node;		/* alloc->dmabufs (sim->alloc_lock) */
	struct dma_buf *buf;
	struct sim_alloc *alloc;	/* NULL once revoked (alloc_lock and resv) */
	u32 *pages;			/* VRAM page index of each exported page */
	u32 npages;
	u32 flags;			/* NVP2P_SIM_EXPORT_* */
};

struct nvp2p_sim {
	struct pci_dev *pdev;
	void __iomem *vram;
	phys_addr_t bar;
	u32 npages;
	unsigned long *used;		/* VRAM pages handed out */
	spinlock_t lock;
	struct mutex alloc_lock;
	struct list_head allocs;
	struct list_head pins;
	struct list_head quarantine;	/* freed pins, poisoned */
	u64 next_va;
	u64 live_allocs, live_pins, callbacks_fired, live_dmabufs;
	u8 uuid[16];
	struct miscdevice misc;
};

static struct nvp2p_sim *sim;

static void sim_set_page_state(u32 page, bool used)
{
	/* A page handed out anew has had no peer. */
	if (used)
		writeb(0, sim->vram + RIG_VRAM_OFF_PEERS + page);
	writeb(used, sim->vram + RIG_VRAM_OFF_STATE + page);
}

/* Called with sim->lock held. */
static struct sim_alloc *sim_find_alloc(u64 va, u64 len)
{
	struct sim_alloc *a;

	list_for_each_entry(a, &sim->allocs, node)
		if (va >= a->va && va - a->va < a->size && len <= a->size - (va - a->va))
			return a;
	return NULL;
}

/* Called with sim->lock held. */
static struct sim_pin *sim_find_pin(struct nvidia_p2p_page_table *pt)
{
	struct sim_pin *p;

	list_for_each_entry(p, &sim->pins, node)
		if (&p->pt == pt)
			return p;
	return NULL;
}

static void sim_release_alloc(struct kref *ref)
{
	struct sim_alloc *a = container_of(ref, struct sim_alloc, ref);
	u32 i;

	spin_lock(&sim->lock);
	for (i = 0; i < a->npages; i++) {
		sim_set_page_state(a->pages[i], false);
		clear_bit(a->pages[i], sim->used);
	}
	sim->live_allocs--;
	spin_unlock(&sim->lock);
	kvfree(a->pages);
	kfree(a);
}

static void sim_destroy_pin(struct sim_pin *p)
{
	kvfree(p->pt.pages);
	kvfree(p->page_structs);
	kfree(p);
}

static phys_addr_t sim_page_phys(u32 page)
{
	return sim->bar + ((u64)page << SIM_PAGE_SHIFT);
}

/*
 * How many peers may reach a VRAM page, in the header, or
 * RIG_VRAM_PEERS_RELEASED once the last of them let it go: the device
 * model counts DMA to such a page as reaching memory a driver had let go.
 * Called with sim_peer_lock held.
 */
static void sim_count_peer(u32 page, int delta)
{
	void __iomem *at = sim->vram + RIG_VRAM_OFF_PEERS + page;
	u8 peers = readb(at);

	lockdep_assert_held(&sim_peer_lock);
	if (peers == RIG_VRAM_PEERS_RELEASED)
		peers = 0;
	peers += delta;
	writeb(peers ?: RIG_VRAM_PEERS_RELEASED, at);
}

/*
 * The DMA address of VRAM page for dev, as nv_dma_map_peer makes it:
 * through dev's DMA API, so that an IOMMU translating for dev maps the BAR.
 * MMIO has no CPU cache to keep in sync.
 */
static int sim_map_page(struct device *dev, u32 page, dma_addr_t *addr)
{
	struct sim_peer_page *pp;
	int ret = 0;

	mutex_lock(&sim_peer_lock);
	hash_for_each_possible(sim_peer_pages, pp, node, page) {
		if (pp->dev == dev && pp->page == page) {
			pp->refs++;
			*addr = pp->addr;
			goto out;
		}
	}
	pp = kzalloc(sizeof(*pp), GFP_KERNEL);
	if (!pp) {
		ret = -ENOMEM;
		goto out;
	}
	pp->addr = dma_map_resource(dev, sim_page_phys(page), SIM_PAGE, DMA_BIDIRECTIONAL,
				    DMA_ATTR_SKIP_CPU_SYNC);
	if (dma_mapping_error(dev, pp->addr)) {
		kfree(pp);
		ret = -EIO;
		goto out;
	}
	pp->dev = dev;
	pp->page = page;
	pp->refs = 1;
	hash_add(sim_peer_pages, &pp->node, page);
	sim_count_peer(page, 1);
	*addr = pp->addr;
out:
	mutex_unlock(&sim_peer_lock);
	return ret;
}

static void sim_unmap_page(struct device *dev, u32 page)
{
	struct sim_peer_page *pp;

	mutex_lock(&sim_peer_lock);
	hash_for_each_possible(sim_peer_pages, pp, node, page) {
		if (pp->dev != dev || pp->page != page)
			continue;
		if (!--pp->refs) {
			hash_del(&pp->node);
			sim_count_peer(page, -1);
			dma_unmap_resource(dev, pp->addr, SIM_PAGE, DMA_BIDIRECTIONAL,
					   DMA_ATTR_SKIP_CPU_SYNC);
			kfree(pp);
		}
		break;
	}
	mutex_unlock(&sim_peer_lock);
}

/* Unmaps entries [0, n) of m. */
static void sim_unmap_pages(struct sim_mapping *m, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		sim_unmap_page(&m->map.pci_dev->dev, m->pages[i]);
}

static void sim_free_mapping(struct sim_mapping *m)
{
	sim_unmap_pages(m, m->map.entries);
	memset(m->map.dma_addresses, 0x6b, m->map.entries * sizeof(u64));
	kvfree(m->map.dma_addresses);
	kvfree(m->pages);
	kfree(m);
}

/*
 * Frees a pin that is off sim->pins, and its DMA mappings, as NVIDIA does
 * after the free callback and in put_pages. Its table is poisoned and, with
 * quarantine, kept so that a later dereference finds SIM_PIN_DEAD.
 */
static void sim_free_pin(struct sim_pin *p)
{
	struct sim_mapping *m, *tmp;
	LIST_HEAD(maps);

	mutex_lock(&p->maplock);
	list_splice_init(&p->mappings, &maps);
	mutex_unlock(&p->maplock);
	list_for_each_entry_safe(m, tmp, &maps, node)
		sim_free_mapping(m);
	kvfree(p->pt.pages);
	kvfree(p->page_structs);
	p->page_structs = NULL;
	p->magic = SIM_PIN_DEAD;
	memset(&p->pt, 0x6b, sizeof(p->pt));
	if (!quarantine) {
		kfree(p);
		return;
	}
	spin_lock(&sim->lock);
	list_add_tail(&p->node, &sim->quarantine);
	spin_unlock(&sim->lock);
}

/*
 * The pin of a table handed to dma_map_pages or dma_unmap_pages, which
 * dereference it unlocked, as NVIDIA's do: with quarantine, a freed one is
 * caught here; without, KASAN catches the read.
 */
static struct sim_pin *sim_pin_of(struct nvidia_p2p_page_table *pt, const char *fn)
{
	struct sim_pin *p = container_of(pt, struct sim_pin, pt);

	if (p->magic != SIM_PIN_LIVE) {
		WARN(1, "nvp2p_sim: %s() on a page table that was freed (use after free)\n", fn);
		return NULL;
	}
	return p;
}

static struct sim_pin *sim_new_pin(u64 npages)
{
	struct sim_pin *p = kzalloc(sizeof(*p), GFP_KERNEL);

	if (!p)
		return NULL;
	p->pt.pages = kvcalloc(npages, sizeof(*p->pt.pages), GFP_KERNEL);
	p->page_structs = kvcalloc(npages, sizeof(*p->page_structs), GFP_KERNEL);
	if (!p->pt.pages || !p->page_structs) {
		kvfree(p->pt.pages);
		kvfree(p->page_structs);
		kfree(p);
		return NULL;
	}
	INIT_LIST_HEAD(&p->mappings);
	mutex_init(&p->maplock);
	p->magic = SIM_PIN_LIVE;
	return p;
}

static void sim_free_alloc(struct sim_alloc *a);
static void sim_revoke_dmabufs(struct sim_alloc *a);

static int sim_get_pages(u64 va, u64 len, struct nvidia_p2p_page_table **out,
			 void (*cb)(void *), void *data, bool persistent)
{
	struct sim_alloc *a;
	struct sim_pin *p;
	u64 first, i, npages;

	if (!sim || !out || !len || !IS_ALIGNED(va, SIM_PAGE) ||
	    !IS_ALIGNED(len, SIM_PAGE) || va + len < va)
		return -EINVAL;
	npages = len >> SIM_PAGE_SHIFT;
	if (npages > sim->npages)
		return -EINVAL;
	p = sim_new_pin(npages);
	if (!p)
		return -ENOMEM;

	down_write(&sim_rm_lock);
	spin_lock(&sim->lock);
	a = sim_find_alloc(va, len);
	if (!a) {
		spin_unlock(&sim->lock);
		up_write(&sim_rm_lock);
		sim_destroy_pin(p);
		return -EINVAL;
	}
	first = (va - a->va) >> SIM_PAGE_SHIFT;
	for (i = 0; i < npages; i++) {
		p->page_structs[i].physical_address =
			sim->bar + ((u64)a->pages[first + i] << SIM_PAGE_SHIFT);
		p->pt.pages[i] = &p->page_structs[i];
	}
	p->pt.version = pt_major == 1 ? NVIDIA_P2P_PAGE_TABLE_VERSION_V1 :
					NVIDIA_P2P_PAGE_TABLE_VERSION;
	p->pt.page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	p->pt.entries = npages;
	p->pt.gpu_uuid = sim->uuid;
	p->alloc = a;
	p->va = va;
	p->free_callback = cb;
	p->data = data;
	p->persistent = persistent;
	kref_get(&a->ref);	/* persistent pins keep it; else dropped below */
	list_add_tail(&p->node, &sim->pins);
	sim->live_pins++;
	spin_unlock(&sim->lock);
	*out = &p->pt;
	up_write(&sim_rm_lock);

	/*
	 * Another thread's cudaFree may come between NVIDIA registering the
	 * callback and get_pages returning: the caller then gets a table that
	 * has already been revoked and freed.
	 */
	if (!persistent && free_in_get_pages) {
		free_in_get_pages--;
		mutex_lock(&sim->alloc_lock);
		if (!a->freed)
			sim_free_alloc(a);
		mutex_unlock(&sim->alloc_lock);
	}
	if (!persistent)
		kref_put(&a->ref, sim_release_alloc);
	return 0;
}

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	if (!free_callback)
		return -EINVAL;
	return sim_get_pages(virtual_address, length, page_table, free_callback,
			     data, false);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

#ifndef NVP2P_SIM_NO_PERSISTENT
int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags)
{
	if (flags & ~NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING)
		return -EINVAL;
	return sim_get_pages(virtual_address, length, page_table, NULL, NULL,
			     true);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);
#endif

/*
 * Releases a pin and the DMA mappings left on it. The table is looked up,
 * not dereferenced: a callback pin whose free callback has run is gone, and
 * NVIDIA's put_pages returns 0 for it (NV_ERR_OBJECT_NOT_FOUND becomes
 * NV_OK), as for no table at all. A free in progress holds sim_rm_lock, so
 * this waits for it. The table is freed after the lock is dropped, as
 * nv_p2p_put_pages frees it after rm_p2p_put_pages returns.
 */
static int sim_put(uint64_t va, struct nvidia_p2p_page_table *pt,
		   bool persistent)
{
	struct sim_alloc *a;
	struct sim_pin *p;

	if (!sim)
		return -EINVAL;
	if (!pt)
		return 0;
	down_write(&sim_rm_lock);
	spin_lock(&sim->lock);
	p = sim_find_pin(pt);
	if (!p || p->persistent != persistent || p->va != va) {
		spin_unlock(&sim->lock);
		up_write(&sim_rm_lock);
		return persistent ? -EINVAL : 0;
	}
	if (!persistent && put_pages_fail) {
		/* RM refused (NV_ERR_INVALID_STATE): the pin stays registered. */
		put_pages_fail--;
		spin_unlock(&sim->lock);
		up_write(&sim_rm_lock);
		/* NVIDIA WARN_ON()s here; a warning would fail every later test. */
		pr_notice("nvp2p_sim: nvidia_p2p_put_pages(%#llx) refused (-EIO): the pin stays until its memory is freed\n",
			  va);
		return -EIO;
	}
	list_del(&p->node);
	sim->live_pins--;
	a = p->alloc;
	spin_unlock(&sim->lock);
	up_write(&sim_rm_lock);
	sim_free_pin(p);
	if (persistent)
		kref_put(&a->ref, sim_release_alloc);
	return 0;
}

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	return sim_put(virtual_address, page_table, false);
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

#ifndef NVP2P_SIM_NO_PERSISTENT
int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags)
{
	if (flags)
		return -EINVAL;
	return sim_put(virtual_address, page_table, true);
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);
#endif

/*
 * As NVIDIA's: the table is read with no lock (a free that races it is a
 * use after free, in NVIDIA's driver too); the pages are mapped for the
 * peer under the API lock, after the topology check; the mapping is linked
 * to the table under the table's own lock.
 */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct sim_mapping *m;
	struct sim_pin *p;
	u32 i, n;
	int ret;

	if (!sim || !peer || !page_table || !dma_mapping || !page_table->gpu_uuid)
		return -EINVAL;
	p = sim_pin_of(page_table, __func__);
	if (!p)
		return -EINVAL;
	n = page_table->entries;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->map.dma_addresses = kvcalloc(n, sizeof(u64), GFP_KERNEL);
	m->pages = kvcalloc(n, sizeof(*m->pages), GFP_KERNEL);
	if (!m->map.dma_addresses || !m->pages) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (i = 0; i < n; i++)
		m->pages[i] = (page_table->pages[i]->physical_address - sim->bar) >> SIM_PAGE_SHIFT;
	m->map.pci_dev = peer;
	m->offset = dma_offset;

	down_write(&sim_rm_lock);
	if (!READ_ONCE(p2p_topology_ok)) {
		ret = SIM_NV_NOT_SUPPORTED;
		goto err_unlock;
	}
	for (i = 0; i < n; i++) {
		dma_addr_t addr;

		ret = sim_map_page(&peer->dev, m->pages[i], &addr);
		if (ret) {
			sim_unmap_pages(m, i);
			goto err_unlock;
		}
		m->map.dma_addresses[i] = addr + m->offset;
	}
	up_write(&sim_rm_lock);

	m->map.version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	m->map.page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	m->map.entries = n;
	m->map.private = p;
	mutex_lock(&p->maplock);
	list_add_tail(&m->node, &p->mappings);
	mutex_unlock(&p->maplock);
	*dma_mapping = &m->map;
	return 0;

err_unlock:
	up_write(&sim_rm_lock);
err_free:
	kvfree(m->map.dma_addresses);
	kvfree(m->pages);
	kfree(m);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

/*
 * As NVIDIA's: no API lock; the mapping is unlinked from the table under
 * the table's lock, and one already gone (freed with its table) is 0.
 */
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct sim_mapping *m = NULL, *it;
	struct sim_pin *p;

	if (!sim || !peer || !page_table || !dma_mapping)
		return -EINVAL;
	p = sim_pin_of(page_table, __func__);
	if (!p)
		return -EINVAL;
	mutex_lock(&p->maplock);
	list_for_each_entry(it, &p->mappings, node)
		if (&it->map == dma_mapping)
			m = it;
	if (m)
		list_del(&m->node);
	mutex_unlock(&p->maplock);
	if (!m)
		return 0;
	WARN_ON(m->map.pci_dev != peer);
	sim_free_mapping(m);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_dma_unmap_pages);

/* No-ops in NVIDIA's driver too: tables are freed by put or revocation. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	return page_table ? 0 : -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_free_page_table);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return dma_mapping ? 0 : -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_free_dma_mapping);

/* xorshift32: deterministic layouts from a seed. */
static u32 sim_rand(u32 *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Picks npages free VRAM pages in the pattern's layout. sim->lock held. */
static int sim_pick_pages(u32 *pages, u32 npages, u32 pattern, u32 seed)
{
	u32 i, n = 0, start, run, *runs;
	unsigned long pg;

	switch (pattern) {
	case NVP2P_SIM_CONTIGUOUS:
		pg = bitmap_find_next_zero_area(sim->used, sim->npages, 1, npages, 0);
		if (pg >= sim->npages)
			return -ENOMEM;
		for (i = 0; i < npages; i++)
			pages[i] = pg + i;
		return 0;
	case NVP2P_SIM_FRAGMENTED:
		/* Highest free pages first: neighbours descend, never adjoin. */
		for (pg = sim->npages - 1; pg > 0 && n < npages; pg--)
			if (!test_bit(pg, sim->used))
				pages[n++] = pg;
		return n == npages ? 0 : -ENOMEM;
	case NVP2P_SIM_RANDOM_RUNS:
		pg = 1;
		for_each_clear_bit_from(pg, sim->used, sim->npages) {
			if (n == npages)
				break;
			pages[n++] = pg;
		}
		if (n < npages)
			return -ENOMEM;
		/* Cut the free list into runs of 1-4 and shuffle the runs. */
		runs = kmalloc_array(npages, sizeof(*runs), GFP_ATOMIC);
		if (!runs)
			return -ENOMEM;
		memcpy(runs, pages, npages * sizeof(*runs));
		seed = seed ?: 1;
		for (start = 0, n = 0; start < npages; start += run) {
			run = min_t(u32, 1 + sim_rand(&seed) % 4, npages - start);
			pages[n++] = start | run << 24;
		}
		for (i = n - 1; i > 0; i--) {
			u32 j = sim_rand(&seed) % (i + 1);

			swap(pages[i], pages[j]);
		}
		/* Expand the shuffled runs back out, last first, in place. */
		start = npages;
		for (i = n; i-- > 0;) {
			u32 s = pages[i] & 0xffffff;

			run = pages[i] >> 24;
			start -= run;
			memcpy(&pages[start], &runs[s], run * sizeof(*runs));
		}
		kfree(runs);
		return 0;
	}
	return -EINVAL;
}

static int sim_ioctl_alloc(struct file *f, struct nvp2p_sim_alloc __user *uarg)
{
	struct nvp2p_sim_alloc arg;
	struct sim_alloc *a;
	u32 i;
	int ret;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (!arg.size || arg.size > (u64)sim->npages << SIM_PAGE_SHIFT ||
	    arg.pattern > NVP2P_SIM_RANDOM_RUNS)
		return -EINVAL;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	a->npages = DIV_ROUND_UP_ULL(arg.size, SIM_PAGE);
	a->size = (u64)a->npages << SIM_PAGE_SHIFT;
	a->pages = kvcalloc(a->npages, sizeof(*a->pages), GFP_KERNEL);
	if (!a->pages) {
		ret = -ENOMEM;
		goto err_free;
	}
	kref_init(&a->ref);
	INIT_LIST_HEAD(&a->dmabufs);
	a->owner = f;

	mutex_lock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	ret = sim_pick_pages(a->pages, a->npages, arg.pattern, arg.seed);
	if (ret) {
		spin_unlock(&sim->lock);
		mutex_unlock(&sim->alloc_lock);
		goto err_free;
	}
	for (i = 0; i < a->npages; i++) {
		set_bit(a->pages[i], sim->used);
		sim_set_page_state(a->pages[i], true);
	}
	a->va = sim->next_va;
	sim->next_va += ALIGN(a->size, SIM_VA_ALIGN);
	list_add_tail(&a->node, &sim->allocs);
	sim->live_allocs++;
	spin_unlock(&sim->lock);
	mutex_unlock(&sim->alloc_lock);

	arg.va = a->va;
	arg.pages = a->npages;
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT;	/* the allocation lives on, freed at close */
	return 0;

err_free:
	kvfree(a->pages);
	kfree(a);
	return ret;
}

/*
 * cudaFree: the VA dies at once; each callback pin's free callback runs
 * under the resource manager's lock, and its table and mappings are freed
 * right after it returns; the pages go back when the last persistent pin
 * and static dma-buf let go (dynamic ones are revoked through move_notify).
 * Called with sim->alloc_lock held.
 */
static void sim_free_alloc(struct sim_alloc *a)
{
	struct sim_pin *p, *tmp;
	LIST_HEAD(revoke);

	a->freed = true;
	down_write(&sim_rm_lock);
	spin_lock(&sim->lock);
	list_del(&a->node);	/* the VA is gone: no new pins */
	list_for_each_entry_safe(p, tmp, &sim->pins, node) {
		if (p->alloc != a || p->persistent)
			continue;
		list_move_tail(&p->node, &revoke);
		sim->live_pins--;
	}
	spin_unlock(&sim->lock);

	unmap_mapping_range(a->owner->f_mapping, a->va, a->size, 1);
	list_for_each_entry_safe(p, tmp, &revoke, node) {
		list_del(&p->node);
		p->free_callback(p->data);
		spin_lock(&sim->lock);
		sim->callbacks_fired++;
		spin_unlock(&sim->lock);
		sim_free_pin(p);
	}
	up_write(&sim_rm_lock);
	sim_revoke_dmabufs(a);
	kref_put(&a->ref, sim_release_alloc);
}

static int sim_ioctl_free(struct file *f, struct nvp2p_sim_free __user *uarg)
{
	struct nvp2p_sim_free arg;
	struct sim_alloc *a;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	mutex_lock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	a = sim_find_alloc(arg.va, 1);
	if (a && (a->va != arg.va || a->owner != f))
		a = NULL;
	spin_unlock(&sim->lock);
	if (a)
		sim_free_alloc(a);
	mutex_unlock(&sim->alloc_lock);
	return a ? 0 : -EINVAL;
}

static int sim_ioctl_table(struct file *f, struct nvp2p_sim_table __user *uarg)
{
	struct nvp2p_sim_table arg;
	struct sim_alloc *a;
	u64 *addrs;
	u32 i, n;
	int ret = 0;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	mutex_lock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	a = sim_find_alloc(arg.va, 1);
	if (!a || a->va != arg.va) {
		spin_unlock(&sim->lock);
		mutex_unlock(&sim->alloc_lock);
		return -EINVAL;
	}
	n = a->npages;
	spin_unlock(&sim->lock);
	/* alloc_lock keeps a alive: only the free ioctl and close free. */
	addrs = kvcalloc(n, sizeof(*addrs), GFP_KERNEL);
	if (!addrs) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++)
		addrs[i] = sim->bar + ((u64)a->pages[i] << SIM_PAGE_SHIFT);
	/* Copied out unlocked: a fault takes mmap_lock, and mmap takes alloc_lock. */
	mutex_unlock(&sim->alloc_lock);
	if (copy_to_user(u64_to_user_ptr(arg.addrs), addrs,
			 min_t(u64, arg.entries, n) * sizeof(*addrs)))
		ret = -EFAULT;
	arg.entries = n;
	if (!ret && copy_to_user(uarg, &arg, sizeof(arg)))
		ret = -EFAULT;
	kvfree(addrs);
	return ret;
out:
	mutex_unlock(&sim->alloc_lock);
	return ret;
}

static int sim_ioctl_counters(struct nvp2p_sim_counters __user *uarg)
{
	struct nvp2p_sim_counters c = {};

	spin_lock(&sim->lock);
	c.live_allocs = sim->live_allocs;
	c.live_pins = sim->live_pins;
	c.callbacks_fired = sim->callbacks_fired;
	c.total_pages = sim->npages - 1;
	c.free_pages = sim->npages - bitmap_weight(sim->used, sim->npages);
	c.bar = sim->bar;
	c.live_dmabufs = sim->live_dmabufs;
	spin_unlock(&sim->lock);
#ifdef NVP2P_SIM_OPEN
	c.caps |= NVP2P_SIM_CAP_DMABUF;
#endif
	return copy_to_user(uarg, &c, sizeof(c)) ? -EFAULT : 0;
}

#ifdef NVP2P_SIM_OPEN
static int sim_dmabuf_attach(struct dma_buf *buf, struct dma_buf_attachment *at)
{
	/*
	 * As nv_dma_buf_attach: the path between the peers must be one NVIDIA
	 * supports, and, BAR memory having no struct page, an importer that
	 * can say (a dynamic one) must take peer-to-peer addresses.
	 */
	if (!READ_ONCE(dmabuf_topology_ok))
		return -ENOTSUPP;
	if (at->importer_ops && !at->peer2peer)
		return -ENOTSUPP;
	return 0;
}

/* Drops the importer's mappings of the first n exported pages. */
static void sim_dmabuf_unmap_pages(struct dma_buf_attachment *at, u32 n)
{
	struct sim_dmabuf *d = at->dmabuf->priv;
	u32 i;

	if (d->flags & NVP2P_SIM_EXPORT_PCIE) {
		/* Raw BAR addresses: nothing mapped, but the peer may reach them. */
		mutex_lock(&sim_peer_lock);
		for (i = 0; i < n; i++)
			sim_count_peer(d->pages[i], -1);
		mutex_unlock(&sim_peer_lock);
		return;
	}
	for (i = 0; i < n; i++)
		sim_unmap_page(at->dev, d->pages[i]);
}

/* How many pages from i on have DMA addresses that run on, within seg. */
static u32 sim_dmabuf_run(const dma_addr_t *addrs, u32 i, u32 n, u32 seg)
{
	u32 run = 1;

	while (i + run < n && addrs[i + run] == addrs[i] + (u64)run * SIM_PAGE &&
	       (u64)(run + 1) * SIM_PAGE <= seg)
		run++;
	return run;
}

/*
 * As nv_dma_buf_map_pfns: the exported pages mapped for the importer
 * through its DMA API (an IOMMU translating for it maps the BAR), or with
 * the PCIe mapping type handed over as BAR addresses; runs of contiguous
 * DMA addresses cut at the importer's largest segment. Failure is NULL, as
 * NVIDIA's.
 */
static struct sg_table *sim_dmabuf_map(struct dma_buf_attachment *at,
				       enum dma_data_direction dir)
{
	struct sim_dmabuf *d = at->dmabuf->priv;
	u32 seg = max_t(u32, dma_get_max_seg_size(at->dev) & ~(SIM_PAGE - 1), SIM_PAGE);
	u32 i, run, nents = 0;
	struct scatterlist *sg;
	struct sg_table *sgt;
	dma_addr_t *addrs;

	if (d->flags & NVP2P_SIM_EXPORT_DYNAMIC) {
		dma_resv_assert_held(at->dmabuf->resv);
		if (!d->alloc)
			return ERR_PTR(-EKEYREVOKED);
	}
	addrs = kvmalloc_array(d->npages, sizeof(*addrs), GFP_KERNEL);
	if (!addrs)
		return NULL;
	for (i = 0; i < d->npages; i++) {
		if (d->flags & NVP2P_SIM_EXPORT_PCIE) {
			addrs[i] = sim_page_phys(d->pages[i]);
			mutex_lock(&sim_peer_lock);
			sim_count_peer(d->pages[i], 1);
			mutex_unlock(&sim_peer_lock);
		} else if (sim_map_page(at->dev, d->pages[i], &addrs[i])) {
			sim_dmabuf_unmap_pages(at, i);
			goto err_addrs;
		}
	}
	for (i = 0; i < d->npages; i += sim_dmabuf_run(addrs, i, d->npages, seg))
		nents++;
	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		goto err_unmap;
	if (sg_alloc_table(sgt, nents, GFP_KERNEL))
		goto err_sgt;
	/* BAR pages have no struct page: only the DMA fields are set. */
	sg = sgt->sgl;
	for (i = 0; i < d->npages; i += run) {
		run = sim_dmabuf_run(addrs, i, d->npages, seg);
		sg_set_page(sg, NULL, run * SIM_PAGE, 0);
		sg_dma_address(sg) = addrs[i];
		sg_dma_len(sg) = run * SIM_PAGE;
		sg = sg_next(sg);
	}
	kvfree(addrs);
	return sgt;

err_sgt:
	kfree(sgt);
err_unmap:
	sim_dmabuf_unmap_pages(at, d->npages);
err_addrs:
	kvfree(addrs);
	return NULL;
}

static void sim_dmabuf_unmap(struct dma_buf_attachment *at, struct sg_table *sgt,
			     enum dma_data_direction dir)
{
	struct sim_dmabuf *d = at->dmabuf->priv;

	sim_dmabuf_unmap_pages(at, d->npages);
	sg_free_table(sgt);
	kfree(sgt);
}

/* As nv_dma_buf_mmap without can_mmap, which CUDA's exports lack. */
static int sim_dmabuf_mmap(struct dma_buf *buf, struct vm_area_struct *vma)
{
	return -ENOTSUPP;
}

static void sim_dmabuf_release(struct dma_buf *buf)
{
	struct sim_dmabuf *d = buf->priv;

	mutex_lock(&sim->alloc_lock);
	list_del(&d->node);
	mutex_unlock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	sim->live_dmabufs--;
	spin_unlock(&sim->lock);
	if (d->alloc)
		kref_put(&d->alloc->ref, sim_release_alloc);
	kvfree(d->pages);
	kfree(d);
}

static const struct dma_buf_ops sim_dmabuf_ops = {
	.attach = sim_dmabuf_attach,
	.map_dma_buf = sim_dmabuf_map,
	.unmap_dma_buf = sim_dmabuf_unmap,
	.release = sim_dmabuf_release,
	.mmap = sim_dmabuf_mmap,
};

/*
 * The revoking variant: a dynamic exporter that takes its memory back when
 * the allocation is freed, telling importers through move_notify. A static
 * importer could not be told, so it may not attach.
 */
static int sim_dmabuf_dynamic_attach(struct dma_buf *buf, struct dma_buf_attachment *at)
{
	if (!at->importer_ops)
		return -EOPNOTSUPP;
	return sim_dmabuf_attach(buf, at);
}

static int sim_dmabuf_pin(struct dma_buf_attachment *at)
{
	return 0;
}

static void sim_dmabuf_unpin(struct dma_buf_attachment *at)
{
}

static const struct dma_buf_ops sim_dmabuf_dynamic_ops = {
	.attach = sim_dmabuf_dynamic_attach,
	.pin = sim_dmabuf_pin,
	.unpin = sim_dmabuf_unpin,
	.map_dma_buf = sim_dmabuf_map,
	.unmap_dma_buf = sim_dmabuf_unmap,
	.release = sim_dmabuf_release,
	.mmap = sim_dmabuf_mmap,
};

/*
 * The allocation is being freed: its dynamic exports let go of it, after
 * their importers have been told (and have stopped using it). Static ones
 * keep it, as NVIDIA's do. Called with sim->alloc_lock held.
 */
static void sim_revoke_dmabufs(struct sim_alloc *a)
{
	struct sim_dmabuf *d, *tmp;

	list_for_each_entry_safe(d, tmp, &a->dmabufs, node) {
		if (!(d->flags & NVP2P_SIM_EXPORT_DYNAMIC))
			continue;
		list_del_init(&d->node);
		dma_resv_lock(d->buf->resv, NULL);
		d->alloc = NULL;
		dma_buf_move_notify(d->buf);
		dma_resv_unlock(d->buf->resv);
		kref_put(&a->ref, sim_release_alloc);
	}
}

static int sim_ioctl_export(struct nvp2p_sim_export __user *uarg)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct nvp2p_sim_export arg;
	struct sim_dmabuf *d;
	struct sim_alloc *a;
	struct dma_buf *buf;
	int fd, ret;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.flags & ~(NVP2P_SIM_EXPORT_PCIE | NVP2P_SIM_EXPORT_DYNAMIC) || !arg.size ||
	    !IS_ALIGNED(arg.va, SIM_PAGE) || !IS_ALIGNED(arg.size, SIM_PAGE) ||
	    arg.size >> SIM_PAGE_SHIFT > sim->npages)
		return -EINVAL;
	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d)
		return -ENOMEM;
	INIT_LIST_HEAD(&d->node);
	d->npages = arg.size >> SIM_PAGE_SHIFT;
	d->flags = arg.flags;
	d->pages = kvmalloc_array(d->npages, sizeof(*d->pages), GFP_KERNEL);
	if (!d->pages) {
		ret = -ENOMEM;
		goto err_free;
	}
	mutex_lock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	a = sim_find_alloc(arg.va, arg.size);
	if (a) {
		kref_get(&a->ref);
		sim->live_dmabufs++;
	}
	spin_unlock(&sim->lock);
	if (!a) {
		ret = -EINVAL;
		goto err_unlock;
	}
	d->alloc = a;
	memcpy(d->pages, a->pages + ((arg.va - a->va) >> SIM_PAGE_SHIFT),
	       d->npages * sizeof(*d->pages));

	info.ops = arg.flags & NVP2P_SIM_EXPORT_DYNAMIC ? &sim_dmabuf_dynamic_ops : &sim_dmabuf_ops;
	info.size = arg.size;
	info.flags = O_RDWR;
	info.priv = d;
	buf = dma_buf_export(&info);
	if (IS_ERR(buf)) {
		ret = PTR_ERR(buf);
		spin_lock(&sim->lock);
		sim->live_dmabufs--;
		spin_unlock(&sim->lock);
		kref_put(&a->ref, sim_release_alloc);
		goto err_unlock;
	}
	d->buf = buf;
	list_add_tail(&d->node, &a->dmabufs);
	mutex_unlock(&sim->alloc_lock);
	fd = dma_buf_fd(buf, O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(buf);	/* release drops the references */
		return fd;
	}
	arg.fd = fd;
	return copy_to_user(uarg, &arg, sizeof(arg)) ? -EFAULT : 0;

err_unlock:
	mutex_unlock(&sim->alloc_lock);
err_free:
	kvfree(d->pages);
	kfree(d);
	return ret;
}

#else
/* NVIDIA's proprietary driver may not use dma-buf's GPL-only exports. */
static int sim_ioctl_export(struct nvp2p_sim_export __user *uarg)
{
	return -EOPNOTSUPP;
}

static void sim_revoke_dmabufs(struct sim_alloc *a)
{
}
#endif

static long sim_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NVP2P_SIM_ALLOC:
		return sim_ioctl_alloc(f, uarg);
	case NVP2P_SIM_FREE:
		return sim_ioctl_free(f, uarg);
	case NVP2P_SIM_TABLE:
		return sim_ioctl_table(f, uarg);
	case NVP2P_SIM_COUNTERS:
		return sim_ioctl_counters(uarg);
	case NVP2P_SIM_EXPORT_DMABUF:
		return sim_ioctl_export(uarg);
	}
	return -ENOTTY;
}

/* Maps the allocation at VA vm_pgoff << PAGE_SHIFT, page by page. */
static int sim_mmap(struct file *f, struct vm_area_struct *vma)
{
	u64 va = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct sim_alloc *a;
	u64 off;
	int ret = 0;

	if (!IS_ALIGNED(va, SIM_PAGE) || !IS_ALIGNED(len, SIM_PAGE))
		return -EINVAL;
	mutex_lock(&sim->alloc_lock);
	spin_lock(&sim->lock);
	a = sim_find_alloc(va, len);
	if (a && a->owner != f)
		a = NULL;
	spin_unlock(&sim->lock);
	if (!a) {
		ret = -EINVAL;
		goto out;
	}
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	/* pgprot_writecombine() and io_remap_pfn_range() are GPL-only. */
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	for (off = 0; off < len && !ret; off += SIM_PAGE) {
		u32 page = a->pages[(va - a->va + off) >> SIM_PAGE_SHIFT];

		ret = remap_pfn_range(vma, vma->vm_start + off,
					 (sim->bar >> PAGE_SHIFT) + ((u64)page << (SIM_PAGE_SHIFT - PAGE_SHIFT)),
					 SIM_PAGE, vma->vm_page_prot);
	}
out:
	mutex_unlock(&sim->alloc_lock);
	return ret;
}

static int sim_release(struct inode *inode, struct file *f)
{
	struct sim_alloc *a;

	mutex_lock(&sim->alloc_lock);
	for (;;) {
		struct sim_alloc *found = NULL;

		spin_lock(&sim->lock);
		list_for_each_entry(a, &sim->allocs, node)
			if (a->owner == f) {
				found = a;
				break;
			}
		spin_unlock(&sim->lock);
		if (!found)
			break;
		sim_free_alloc(found);
	}
	mutex_unlock(&sim->alloc_lock);
	return 0;
}

static const struct file_operations sim_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = sim_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = sim_mmap,
	.release = sim_release,
};

static int sim_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct nvp2p_sim *s;
	u64 len;
	int ret;

	if (sim)
		return -EBUSY;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	len = pci_resource_len(pdev, 2);
	if (len < 2 * SIM_PAGE)
		return -ENODEV;
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return -ENOMEM;
	ret = -ENOMEM;
	s->vram = devm_ioremap_wc(&pdev->dev, pci_resource_start(pdev, 2), len);
	if (!s->vram)
		goto err_free;
	/* Both rig devices are 1af4:1110; the VRAM carries this magic. */
	ret = -ENODEV;
	if (readq(s->vram + RIG_VRAM_OFF_MAGIC) != RIG_VRAM_MAGIC)
		goto err_free;
	if (readl(s->vram + RIG_VRAM_OFF_VERSION) != RIG_VRAM_VERSION) {
		dev_err(&pdev->dev, "VRAM header version %u, want %u\n",
			readl(s->vram + RIG_VRAM_OFF_VERSION), RIG_VRAM_VERSION);
		goto err_free;
	}
	ret = pcim_iomap_regions(pdev, BIT(2), "nvp2p_sim");
	if (ret)
		goto err_free;
	s->pdev = pdev;
	s->bar = pci_resource_start(pdev, 2);
	s->npages = len >> SIM_PAGE_SHIFT;
	if (RIG_VRAM_OFF_STATE + s->npages > RIG_VRAM_OFF_PEERS ||
	    RIG_VRAM_OFF_PEERS + s->npages > RIG_VRAM_PAGE) {
		dev_err(&pdev->dev, "%u VRAM pages: the header has room for %u\n",
			s->npages, RIG_VRAM_OFF_PEERS - RIG_VRAM_OFF_STATE);
		ret = -ENODEV;
		goto err_free;
	}
	ret = -ENOMEM;
	s->used = bitmap_zalloc(s->npages, GFP_KERNEL);
	if (!s->used)
		goto err_free;
	set_bit(0, s->used);	/* page 0 is the header */
	memset_io(s->vram + RIG_VRAM_OFF_STATE, 0, s->npages);
	memset_io(s->vram + RIG_VRAM_OFF_PEERS, 0, s->npages);
	spin_lock_init(&s->lock);
	mutex_init(&s->alloc_lock);
	INIT_LIST_HEAD(&s->allocs);
	INIT_LIST_HEAD(&s->pins);
	INIT_LIST_HEAD(&s->quarantine);
	s->next_va = SIM_VA_BASE;
	memcpy(s->uuid, "nvp2p_sim GPU-0", 16);
	s->misc.minor = MISC_DYNAMIC_MINOR;
	s->misc.name = "nvp2p_sim";
	s->misc.fops = &sim_fops;
	s->misc.mode = 0660;
	s->misc.parent = &pdev->dev;
	/* Tell the device model where the BAR sits: it translates DMA. */
	writeq(s->bar, s->vram + RIG_VRAM_OFF_BAR);
	sim = s;
	ret = misc_register(&s->misc);
	if (ret) {
		sim = NULL;
		goto err_free;
	}
	pci_set_drvdata(pdev, s);
	dev_notice(&pdev->dev, "simulated GPU: %u MiB VRAM at %pa, page table v%u\n",
		   (u32)(len >> 20), &s->bar, pt_major == 1 ? 1 : 2);
	return 0;

err_free:
	bitmap_free(s->used);
	kfree(s);
	return ret;
}

static void sim_remove(struct pci_dev *pdev)
{
	struct nvp2p_sim *s = pci_get_drvdata(pdev);
	struct sim_pin *p, *tmp;

	misc_deregister(&s->misc);
	list_for_each_entry_safe(p, tmp, &s->quarantine, node)
		kfree(p);	/* its arrays went with the free */
	if (!hash_empty(sim_peer_pages))
		dev_warn(&pdev->dev, "leak: VRAM pages still mapped for a peer at unload\n");
	if (s->live_allocs || s->live_pins || s->live_dmabufs)
		dev_warn(&pdev->dev, "leak: %llu allocations, %llu pins, %llu dma-bufs live at unload\n",
			 s->live_allocs, s->live_pins, s->live_dmabufs);
	writeq(0, s->vram + RIG_VRAM_OFF_BAR);
	sim = NULL;
	bitmap_free(s->used);
	kfree(s);
}

static const struct pci_device_id sim_ids[] = {
	{ PCI_DEVICE(PCI_VENDOR_ID_REDHAT_QUMRANET, 0x1110) },	/* ivshmem */
	{ }
};

static struct pci_driver sim_driver = {
	.name = "nvp2p_sim",
	.id_table = sim_ids,
	.probe = sim_probe,
	.remove = sim_remove,
};
module_pci_driver(sim_driver);

MODULE_DESCRIPTION("Simulated NVIDIA GPU exporting the P2P API, for the gpufpga rig");
#ifdef NVP2P_SIM_OPEN
MODULE_LICENSE("Dual MIT/GPL");
#else
MODULE_LICENSE("NVIDIA");
#endif
#ifdef NVP2P_SIM_OPEN
GPUFPGA_IMPORT_DMA_BUF_NS();
#endif
