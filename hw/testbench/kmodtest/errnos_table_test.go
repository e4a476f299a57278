package kmodtest

import "golang.org/x/sys/unix"

// commonErrnos are those every ioctl may return (the uapi header's
// opening comment).
var commonErrnos = []unix.Errno{unix.EFAULT, unix.ENODEV, unix.ENOTTY, unix.EINVAL, unix.E2BIG}

// callErrnos are the errnos each call documents in the uapi header's
// "Errors:" lists (read() in its record's comment), besides the common
// ones; TestHeaderListsEveryErrno holds the header to this table and the
// guest tests hold the driver to it.
var callErrnos = map[string][]unix.Errno{
	"INFO":           nil,
	"PIN":            {unix.EINVAL, unix.EBADF, unix.EOPNOTSUPP, unix.EXDEV, unix.EKEYREVOKED, unix.EPERM, unix.ENOSPC, unix.ENOMEM, unix.EFAULT, unix.EIO, unix.EINTR},
	"UNPIN":          {unix.EINVAL, unix.ENOENT, unix.EBUSY},
	"QUERY":          {unix.EINVAL, unix.EPERM, unix.ENOENT},
	"XFER":           {unix.EINVAL, unix.ENXIO, unix.EBADF, unix.ENOENT, unix.EBUSY, unix.EAGAIN, unix.ENOMEM, unix.EKEYREVOKED, unix.E2BIG, unix.ETIMEDOUT, unix.EIO, unix.ENODEV, unix.EINTR, unix.ECONNRESET},
	"CANCEL":         {unix.EINVAL, unix.ENOENT},
	"STREAM_START":   {unix.EINVAL, unix.EBUSY, unix.ENOENT, unix.EKEYREVOKED, unix.E2BIG, unix.ENOMEM, unix.ENODEV, unix.ECONNRESET},
	"STREAM_RELEASE": {unix.EINVAL, unix.ENOENT, unix.ENOMEM},
	"STREAM_STOP":    {unix.EINVAL, unix.ENOENT},
	"USER_IRQ":       {unix.EINVAL, unix.EAGAIN, unix.ETIMEDOUT, unix.EINTR, unix.ENODEV, unix.ECONNRESET},
	"read":           {unix.EINVAL, unix.EAGAIN, unix.EINTR, unix.EFAULT, unix.ENODEV},
}
