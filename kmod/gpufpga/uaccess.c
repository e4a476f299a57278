// SPDX-License-Identifier: GPL-2.0
/* Ioctl structs in and out of user space, of any size their ABI versions had. */
#include <linux/uaccess.h>

#include "gpufpga.h"

/**
 * gpufpga_copy_in - copy an ioctl struct in from user space
 * @dst: the driver's struct
 * @ksize: its size
 * @src: the caller's
 * @usize: its size
 * @minsize: the smallest size an ABI version had
 *
 * A shorter struct (an older ABI) reads as zero-extended; a longer one
 * must have a zero tail.
 *
 * Context: process context, may sleep.
 * Return: 0; -EINVAL for a struct under minsize; -E2BIG for a tail not
 * zero; -EFAULT.
 */
int gpufpga_copy_in(void *dst, size_t ksize, void __user *src, unsigned int usize,
		    size_t minsize)
{
	if (usize < minsize)
		return -EINVAL;
	return copy_struct_from_user(dst, ksize, src, usize);
}

/**
 * gpufpga_copy_out - copy an ioctl struct out to user space
 * @dst: the caller's struct
 * @usize: its size
 * @src: the driver's
 * @ksize: its size
 *
 * A shorter struct (an older ABI) gets what fits; a longer one a zero tail.
 *
 * Context: process context, may sleep.
 * Return: 0, or -EFAULT.
 */
int gpufpga_copy_out(void __user *dst, unsigned int usize, const void *src, size_t ksize)
{
	if (copy_to_user(dst, src, min_t(size_t, usize, ksize)))
		return -EFAULT;
	if (usize > ksize && clear_user(dst + ksize, usize - ksize))
		return -EFAULT;
	return 0;
}
