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

GO_CMDS := ./cmd/... ./hw/testbench/cmd/... ./examples/...
MODULE_DIRS := hw/testbench/nvp2p_sim kmod/gpufpga
MODULES_OUT := $(CURDIR)/build/modules
VMLINUX := $(CURDIR)/build/vmlinux-$(KVER)

.PHONY: all deps build kmod vmtest test unit bench demo lint clean godefs bpf gpubench gpubin gputest ptx

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

# The NVIDIA bridge links against NVIDIA's exports: the real driver's
# Module.symvers with NVIDIA_SRC=<open-gpu-kernel-modules/kernel-open>, else
# the rig's simulated GPU.
NV_SYMVERS ?= $(if $(NVIDIA_SRC),$(NVIDIA_SRC)/Module.symvers,$(CURDIR)/hw/testbench/nvp2p_sim/Module.symvers)

# W=1 and sparse (C=2); any warning fails the build.
define build_module
	@set -o pipefail; $(MAKE) -s -C $(KDIR) M=$(CURDIR)/$(1) W=1 C=2 $(2) modules 2>&1 | tee $(CURDIR)/build/kmod.log
	@if grep -E 'warning:|error:' $(CURDIR)/build/kmod.log | grep -v 'Skipping BTF generation'; then \
		echo "kmod: $(1) is not W=1/sparse clean" >&2; exit 1; fi
	@cp $(CURDIR)/$(1)/*.ko $(MODULES_OUT)/
endef

kmod: $(VMLINUX)
	@test -d $(KDIR) || { echo "kmod: no kernel headers at $(KDIR): run make deps" >&2; exit 1; }
	@mkdir -p $(MODULES_OUT)
	$(call build_module,hw/testbench/nvp2p_sim,)
	$(call build_module,kmod/gpufpga,KBUILD_EXTRA_SYMBOLS=$(NV_SYMVERS) NVIDIA_SRC=$(NVIDIA_SRC))
	@# Module BTF, split against the kernel's, so fentry/fexit reach our functions.
	@for ko in $(MODULES_OUT)/*.ko; do \
		pahole -J --btf_gen_floats -j --lang_exclude=rust --btf_base $(VMLINUX) $$ko || exit 1; \
	done

# Debian ships no vmlinux: take the ELF image (with .BTF) out of the bzImage.
$(VMLINUX):
	@test -f /boot/vmlinuz-$(KVER) || { echo "no /boot/vmlinuz-$(KVER): run make deps" >&2; exit 1; }
	@mkdir -p $(dir $@)
	off=$$(LC_ALL=C grep -aboP '\xFD7zXZ\x00' /boot/vmlinuz-$(KVER) | head -n 1 | cut -d: -f1); \
		test -n "$$off" && tail -c +$$((off + 1)) /boot/vmlinuz-$(KVER) | xz -dc --single-stream > $@.tmp
	@mv $@.tmp $@

# Boots QEMU with the simulated rig and runs the guest test packages.
vmtest: kmod
	GPUFPGA_MODULES=$(MODULES_OUT) KVER=$(KVER) $(GO) test -tags vmtest -count=1 -timeout 15m -v -run TestRig ./hw/testbench/vmtest/

# GPU work runs on a machine with an NVIDIA GPU, which needs neither Go nor
# the CUDA toolkit: `make gpubin` here, copy bin/gpu/ there, and run
# bin/gpu/run there (the GPU tests, then the benchmark into results/).
GPU_TEST_PKGS := cuda gpucheck stream

gpubin:
	@mkdir -p $(BIN)/gpu
	CGO_ENABLED=0 $(GO) build -o $(BIN)/gpu/ ./cmd/gpubench
	@for p in $(GPU_TEST_PKGS); do \
		CGO_ENABLED=0 $(GO) test -c -tags gpu -o $(BIN)/gpu/$$p.test ./pkg/$$p/ || exit 1; \
	done
	cp hw/gpu/run $(BIN)/gpu/run

# The same on a GPU machine that has Go.
gputest: gpubin
	$(BIN)/gpu/run

# One pass of measurements on the GPU, as JSON in results/.
gpubench: gpubin
	@mkdir -p results
	$(BIN)/gpu/gpubench > results/$$(date -u +%F)-$$(hostname)-gpubench.json

# The frame checker's PTX, for every GPU from compute capability 8.0 on
# (needs nvcc; the PTX is committed).
NVCC ?= nvcc
ptx:
	$(NVCC) -ptx -arch=compute_80 -O3 pkg/gpucheck/framecheck.cu -o pkg/gpucheck/framecheck.ptx

# The BPF objects of pkg/trace and their Go bindings, from vmlinux.h made
# from the BTF of the kernel the rig boots (needs clang, libbpf-dev, bpftool).
bpf: $(VMLINUX)
	bpftool btf dump file $(VMLINUX) format c > pkg/trace/bpf/vmlinux.h
	$(GO) generate ./pkg/trace

# The Go mirror of the driver's ABI (needs gcc).
godefs:
	cd pkg/p2p && (echo '//go:build linux'; echo; $(GO) tool cgo -godefs types_linux.go) | gofmt > ztypes_linux.go

# amd64 and arm64 (GH200/GB200 hosts), and the guest tests' build tag.
lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt needed:"; echo "$$fmt"; exit 1; fi
	@sc=$$($(GO) tool -n staticcheck) || exit 1; \
	for arch in amd64 arm64; do \
		echo "lint: GOARCH=$$arch"; \
		GOARCH=$$arch $(GO) vet ./... || exit 1; \
		GOARCH=$$arch $(GO) vet -tags vmguest ./... || exit 1; \
		GOARCH=$$arch $$sc ./... || exit 1; \
		GOARCH=$$arch CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/p2pctl || exit 1; \
	done
	@deps=$$($(GO) list -deps ./cmd/p2pctl ./pkg/... | grep '/hw/'); if [ -n "$$deps" ]; then echo "lint: production code imports the rig:"; echo "$$deps"; exit 1; fi

unit:
	$(GO) test -count=1 ./...

test: deps lint unit vmtest

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

# The engine model alone, then the whole rig: driver, simulated FPGA and GPU.
demo: deps build kmod
	@echo "== 1. XDMA engine model, in process"
	@$(BIN)/p2p-testbench selftest
	@echo
	@echo "== 2. The driver in a QEMU guest against the simulated FPGA and GPU (log: build/demo.log)"
	@set -o pipefail; GPUFPGA_MODULES=$(MODULES_OUT) KVER=$(KVER) $(GO) test -tags vmtest -count=1 -timeout 10m -v \
		-run TestDemo ./hw/testbench/vmtest/ > build/demo.log 2>&1 \
		|| { tail -n 40 build/demo.log; echo "demo failed: see build/demo.log" >&2; exit 1; }
	@sed -n 's/.*DEMO| \{0,1\}//p' build/demo.log

clean:
	rm -rf $(BIN) build
	@for d in $(MODULE_DIRS); do [ ! -d $(KDIR) ] || $(MAKE) -s -C $(KDIR) M=$(CURDIR)/$$d clean; done
	$(GO) clean -testcache
