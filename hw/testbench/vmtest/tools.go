//go:build tools

package vmtest

// The guest's init and test runner, built into the initramfs by govmtest;
// imported here so go.mod and go.sum pin them.
import (
	_ "github.com/hugelgupf/vmtest/vminit/gouinit"
	_ "github.com/hugelgupf/vmtest/vminit/shutdownafter"
	_ "github.com/hugelgupf/vmtest/vminit/vmmount"
	_ "github.com/u-root/u-root/cmds/core/init"
)
