// SPDX-License-Identifier: GPL-2.0
/*
 * The rig's system sleep, for one PCI device: the PCI core's own sleep
 * callbacks (the bus's dev_pm_ops, which call the driver's) run in the
 * order the PM core runs them in a system suspend, in hibernation's
 * freeze and thaw (the snapshot), or across a whole hibernation as the
 * restored kernel sees it: frozen at the snapshot, then restored after
 * the power came back (here, a trip through D3hot, which resets the
 * function).
 *
 * What it leaves out of the PM core: tasks are not frozen, and the device's
 * interrupts stay enabled through the noirq phases, which is harsher on
 * the driver, not kinder.
 *
 * A whole-system sleep (/sys/power/pm_test) cannot be tested in the rig's
 * guest: its virtio 9p transport, which carries the tests' results, has no
 * freeze or restore and is reset under its mount by virtio-pci's restore.
 *
 *   echo "0000:01:00.0 suspend 200" > /sys/kernel/debug/rigpm
 *
 * runs suspend, suspend_late and suspend_noirq, sleeps 200 ms, then runs
 * resume_noirq, resume_early and resume; "freeze" runs freeze and thaw,
 * "hibernate" freeze and restore. The write returns the first error, or
 * EOPNOTSUPP where the kernel has no such sleep (no hibernation).
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pm.h>

typedef int (*rigpm_cb)(struct device *dev);

/* A transition's phases, as offsets of their callbacks in dev_pm_ops. */
struct rigpm_transition {
	const char *name;
	size_t down[3];
	size_t up[3];
	bool power_loss;
};

#define RIGPM_PHASES(a, b, c) \
	{ offsetof(const struct dev_pm_ops, a), offsetof(const struct dev_pm_ops, b), \
	  offsetof(const struct dev_pm_ops, c) }

static const struct rigpm_transition rigpm_transitions[] = {
	{ "suspend", RIGPM_PHASES(suspend, suspend_late, suspend_noirq),
	  RIGPM_PHASES(resume_noirq, resume_early, resume) },
	{ "freeze", RIGPM_PHASES(freeze, freeze_late, freeze_noirq),
	  RIGPM_PHASES(thaw_noirq, thaw_early, thaw) },
	{ "hibernate", RIGPM_PHASES(freeze, freeze_late, freeze_noirq),
	  RIGPM_PHASES(restore_noirq, restore_early, restore), true },
};

static struct dentry *rigpm_file;

/* The bus's callback of a phase: NULL where the kernel lacks the sleep. */
static rigpm_cb rigpm_phase(const struct dev_pm_ops *pm, size_t phase)
{
	return *(const rigpm_cb *)((const char *)pm + phase);
}

/*
 * Runs n phases of one direction; stops at the first error, as the PM
 * core does, and returns how many completed.
 */
static int rigpm_run(struct device *dev, const struct dev_pm_ops *pm,
		     const size_t *phase, int n, int *err)
{
	int i;

	for (i = 0; i < n; i++) {
		rigpm_cb cb = rigpm_phase(pm, phase[i]);

		if (!cb)
			continue;
		*err = cb(dev);
		if (*err) {
			dev_err(dev, "rigpm: phase %d failed: %d\n", i, *err);
			return i;
		}
	}
	return i;
}

static int rigpm_cycle(struct pci_dev *pdev, const struct rigpm_transition *tr,
		       unsigned int asleep_ms)
{
	struct device *dev = &pdev->dev;
	const struct dev_pm_ops *pm = dev->bus->pm;
	int err_down = 0, err_up = 0, down;

	/* A kernel without hibernation has no freeze or restore. */
	if (!pm || !rigpm_phase(pm, tr->down[0]) || !rigpm_phase(pm, tr->up[2]))
		return -EOPNOTSUPP;
	device_lock(dev);
	if (!dev->driver) {
		device_unlock(dev);
		return -ENODEV;
	}
	dev_info(dev, "rigpm: %s for %u ms\n", tr->name, asleep_ms);
	down = rigpm_run(dev, pm, tr->down, 3, &err_down);
	if (down == 3) {
		if (tr->power_loss)
			pci_set_power_state(pdev, PCI_D3hot);
		msleep(asleep_ms);
	}
	/*
	 * As the PM core's suspend_late phase marks it: the device must be
	 * brought back, not left as a suspend that was never entered.
	 */
	dev->power.must_resume = true;
	/* The phases that went down come up again, in reverse order. */
	rigpm_run(dev, pm, tr->up + 3 - down, down, &err_up);
	if (!err_up && pdev->current_state != PCI_D0)
		err_up = -EIO;
	device_unlock(dev);
	return err_down ? err_down : err_up;
}

static ssize_t rigpm_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[64], bdf[16], what[16];
	unsigned int asleep_ms = 0;
	struct pci_dev *pdev;
	struct device *dev;
	size_t i;
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sscanf(buf, "%15s %15s %u", bdf, what, &asleep_ms) < 2 || asleep_ms > 10000)
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(rigpm_transitions); i++)
		if (!strcmp(what, rigpm_transitions[i].name))
			break;
	if (i == ARRAY_SIZE(rigpm_transitions))
		return -EINVAL;
	dev = bus_find_device_by_name(&pci_bus_type, NULL, bdf);
	if (!dev)
		return -ENODEV;
	pdev = to_pci_dev(dev);
	ret = rigpm_cycle(pdev, &rigpm_transitions[i], asleep_ms);
	put_device(dev);
	return ret ? ret : len;
}

static const struct file_operations rigpm_fops = {
	.owner = THIS_MODULE,
	.write = rigpm_write,
};

static int __init rigpm_init(void)
{
	rigpm_file = debugfs_create_file("rigpm", 0200, NULL, NULL, &rigpm_fops);
	return 0;
}

static void __exit rigpm_exit(void)
{
	debugfs_remove(rigpm_file);
}

module_init(rigpm_init);
module_exit(rigpm_exit);
MODULE_DESCRIPTION("gpufpga rig: a PCI device's system sleep callbacks, run alone");
MODULE_LICENSE("GPL");
