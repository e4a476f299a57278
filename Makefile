# gpufpga: one entry point. `make demo` and `make test` set everything up on
# a fresh Debian 12 machine (as root) and run.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin

# The Debian kernel the modules are built for and the guest boots: the
# newest installed linux-headers-*-amd64, not the running kernel.
KVER ?= $(shell ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sed 's|.*/linux-headers-||' | sort -V | tail -n 1)
KDIR ?= /lib/modules/$(KVER)/build

DEB_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 \
	clang llvm libbpf-dev dwarves bpftool sparse gcc make xz-utils

GO_CMDS := ./cmd/... ./hw/testbench/cmd/...
MODULE_DIRS := hw/testbench/nvp2p_sim kmod/gpufpga
MODULES_OUT := $(CURDIR)/build/modules

.PHONY: all deps build kmod vmtest test unit bench demo lint clean

all: build

# Installs only what is missing, so it is cheap to run every time.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing" $$missing; \
		if [ "$$(id -u)" != 0 ]; then echo "deps: run as root to install packages" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
	@$(GO) mod download

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(GO_CMDS)

# W=1 and sparse (C=2); any warning fails the build.
kmod:
	@test -d $(KDIR) || { echo "kmod: no kernel headers at $(KDIR): run make deps" >&2; exit 1; }
	@mkdir -p $(MODULES_OUT)
	@set -o pipefail; for d in $(MODULE_DIRS); do \
		$(MAKE) -s -C $(KDIR) M=$(CURDIR)/$$d W=1 C=2 modules 2>&1 | tee $(CURDIR)/build/kmod.log; \
		if grep -E 'warning:|error:' $(CURDIR)/build/kmod.log | grep -v 'Skipping BTF generation'; then \
			echo "kmod: $$d is not W=1/sparse clean" >&2; exit 1; fi; \
		cp $(CURDIR)/$$d/*.ko $(MODULES_OUT)/ || exit 1; \
	done

# Boots QEMU with the simulated rig and runs the guest test packages.
vmtest: kmod
	GPUFPGA_MODULES=$(MODULES_OUT) KVER=$(KVER) $(GO) test -tags vmtest -count=1 -timeout 15m -v ./hw/testbench/vmtest/

lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt needed:"; echo "$$fmt"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

unit:
	$(GO) test -count=1 ./...

test: deps lint unit vmtest

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

demo: deps build
	$(BIN)/p2p-testbench selftest

clean:
	rm -rf $(BIN) build
	@for d in $(MODULE_DIRS); do [ ! -d $(KDIR) ] || $(MAKE) -s -C $(KDIR) M=$(CURDIR)/$$d clean; done
	$(GO) clean -testcache
