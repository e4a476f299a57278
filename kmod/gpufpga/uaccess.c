// SPDX-License-Identifier: GPL-2.0
/* Ioctl structs in and out of user space, of any size their ABI versions had. */
#include <linux/uaccess.h>

#include "gpufpga.h"

/*
 * Copies an ioctl struct of usize bytes into one of ksize: a shorter one
 * (an older ABI, at least minsize) reads as zero-extended; a longer one
 * must have a zero tail.
 */
int gpufpga_copy_in(void *dst, size_t ksize, void __user *src, unsigned int usize,
		    size_t minsize)
{
	if (usize < minsize)
		return -EINVAL;
	return copy_struct_from_user(dst, ksize, src, usize);
}

int gpufpga_copy_out(void __user *dst, unsigned int usize, const void *src, size_t ksize)
{
	if (copy_to_user(dst, src, min_t(size_t, usize, ksize)))
		return -EFAULT;
	if (usize > ksize && clear_user(dst + ksize, usize - ksize))
		return -EFAULT;
	return 0;
}
