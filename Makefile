# gpufpga: one entry point. `make demo` and `make test` set everything up on
# a fresh Debian 12 machine (as root) and run.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin

# The kernels the modules are built for and the guest boots: Debian's 6.1
# (bookworm) and 6.12 (bookworm-backports), the newest installed of each.
# KVER is the one `make kmod` and `make demo` use. They are looked up when a
# recipe runs, never in a prerequisite list (expanded as the Makefile is
# read), so `make deps kmod` finds the kernels that deps has just installed.
headers = $(shell ls -d /usr/src/linux-headers-$(1)-amd64 2>/dev/null | sed 's|.*/linux-headers-||' | sort -V | tail -n 1)
KVER_61  ?= $(call headers,6.1.0-*)
KVER_612 ?= $(call headers,6.12.*+deb12)
KVER ?= $(KVER_61)
KDIR ?= /lib/modules/$(KVER)/build

DEB_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 \
	clang llvm libbpf-dev dwarves bpftool sparse gcc g++ libc6-dev make xz-utils zstd cpio \
	linux-source-6.1 bc bison flex libelf-dev libssl-dev dkms adduser \
	dpkg-dev meson ninja-build libglib2.0-dev libpixman-1-dev libcap-ng-dev libattr1-dev libfdt-dev zlib1g-dev python3 \
	verilator
# From bookworm-backports, pinned so that nothing else comes from there.
BPO_PACKAGES := linux-headers-6.12-amd64
BPO_LIST := /etc/apt/sources.list.d/gpufpga-backports.sources
# Debian's QEMU source, which the rig's QEMU is built from.
SRC_LIST := /etc/apt/sources.list.d/gpufpga-src.sources

GO_CMDS := ./cmd/... ./hw/testbench/cmd/... ./examples/...
MODULES_OUT = $(CURDIR)/build/kmod-$(KVER)

.PHONY: tree-check fresh-root test-phases rtl rtl-bench rtl-soak examples-c all deps build kmod dkms-check deb deb-check qemu debug-kernel vmtest vmtest-6.1 vmtest-6.12 vmtest-swiotlb vmtest-iommu vmtest-rtl vmtest-debug test unit bench bench-icount demo lint clean godefs bpf gpubench gpubin gputest ptx ptxcheck

all: build

# Installs only what is missing, so it is cheap to run every time.
deps:
	@if [ ! -f $(BPO_LIST) ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "deps: run as root to add bookworm-backports" >&2; exit 1; fi; \
		printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > $(BPO_LIST); \
		printf 'Package: *\nPin: release n=bookworm-backports\nPin-Priority: 100\n' > /etc/apt/preferences.d/gpufpga-backports; \
		rm -f /var/lib/apt/lists/.gpufpga-updated; \
	fi
	@if [ ! -f $(SRC_LIST) ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "deps: run as root to add deb-src lines" >&2; exit 1; fi; \
		printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb-src\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > $(SRC_LIST); \
		apt-get update -qq; \
	fi
	@missing=$$(for p in $(DEB_PACKAGES) $(BPO_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing" $$missing; \
		if [ "$$(id -u)" != 0 ]; then echo "deps: run as root to install packages" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$(DEB_PACKAGES) >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports \
			$(BPO_PACKAGES) >/dev/null || exit 1; \
	fi
	@$(GO) mod download

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(GO_CMDS)

# The NVIDIA bridge links against NVIDIA's exports: the real driver's
# Module.symvers with NVIDIA_SRC=<open-gpu-kernel-modules/kernel-open>, else
# the rig's simulated GPU.
NV_SYMVERS ?= $(if $(NVIDIA_SRC),$(NVIDIA_SRC)/Module.symvers,$(CURDIR)/hw/testbench/nvp2p_sim/Module.symvers)

# The modules for kernel $(1), W=1 and sparse (C=2) clean, into
# build/kmod-$(1)/; $(2) is that kernel's build tree, $(3) its vmlinux.
kmod_for = hw/testbench/kernel/build-modules.sh $(2) $(3) $(CURDIR)/build/kmod-$(1) $(NVIDIA_SRC)
# The same for an installed Debian kernel $(1), whose vmlinux comes out of
# its bzImage (Debian ships none) into build/ once.
debian_kmod = vm=$$(hw/testbench/kernel/vmlinux-for.sh "$(1)" $(CURDIR)/build) && \
	$(call kmod_for,$(1),/lib/modules/$(1)/build,$$vm)

kmod:
	vm=$$(hw/testbench/kernel/vmlinux-for.sh "$(KVER)" $(CURDIR)/build) && \
	$(call kmod_for,$(KVER),$(KDIR),$$vm)

# The guest suite on one kernel: $(1) release, $(2) image, $(3) modules,
# $(4) guest kernel modules ("" when what the guest needs is built in),
# $(5) the NVIDIA driver the simulated GPU plays: proprietary, open or old;
# $(6) the host-side test that boots it (default TestRig, the whole suite).
VMTEST_PKG := ./hw/testbench/vmtest/
vmtest_on = GPUFPGA_QEMU=$$(hw/testbench/qemu/build-qemu.sh) GPUFPGA_MODULES=$(3) KVER=$(1) GPUFPGA_KERNEL=$(2) GPUFPGA_GUEST_KMODS=$(4) GPUFPGA_NVIDIA=$(5) \
	$(GO) test -tags vmtest -count=1 -timeout 75m -v -run '^$(or $(6),TestRig)$$' $(VMTEST_PKG)

# Boots QEMU with the simulated rig and runs the guest test packages, on
# Debian's 6.1 next to a proprietary NVIDIA driver and on 6.12 next to the
# open one, each with 2 vCPUs; then a 6.12 guest whose DMA is bounced.
# The simulated card reports status as PG195's kindest reading on 6.1, and
# with every behaviour PG195 leaves open (GPUFPGA_QUIRKS, see
# hw/testbench/xdmamodel/quirks.go) on 6.12 and the debug kernel.
CARD_QUIRKS ?= all
vmtest: vmtest-6.1 vmtest-6.12 vmtest-swiotlb vmtest-iommu

# The C examples that kmodtest runs in the guest (TestCStreamExample,
# TestCResidentExample), linked statically: the guest has no C library of
# its own.
guest-c-example:
	$(call c_example,-static,hw/testbench/kmodtest/testdata/c-stream,c-stream)
	$(call c_example,-static,hw/testbench/kmodtest/testdata/c-resident,c-resident)

vmtest-6.1: qemu guest-c-example
	@test -n "$(KVER_61)" || { echo "vmtest: no 6.1 kernel headers: run make deps" >&2; exit 1; }
	$(call debian_kmod,$(KVER_61))
	$(call vmtest_on,$(KVER_61),/boot/vmlinuz-$(KVER_61),$(CURDIR)/build/kmod-$(KVER_61),/lib/modules/$(KVER_61),proprietary)

vmtest-6.12: qemu guest-c-example
	@test -n "$(KVER_612)" || { echo "vmtest: no 6.12 kernel headers: run make deps" >&2; exit 1; }
	$(call debian_kmod,$(KVER_612))
	GPUFPGA_QUIRKS='$(CARD_QUIRKS)' $(call vmtest_on,$(KVER_612),/boot/vmlinuz-$(KVER_612),$(CURDIR)/build/kmod-$(KVER_612),/lib/modules/$(KVER_612),open)

# DMA through SWIOTLB bounce buffers (swiotlb=force), on 6.12: host pins
# are refused with the reason, GPU pins work.
vmtest-swiotlb: qemu
	@test -n "$(KVER_612)" || { echo "vmtest: no 6.12 kernel headers: run make deps" >&2; exit 1; }
	$(call debian_kmod,$(KVER_612))
	$(call vmtest_on,$(KVER_612),/boot/vmlinuz-$(KVER_612),$(CURDIR)/build/kmod-$(KVER_612),/lib/modules/$(KVER_612),open,TestBounceBuffers)

# An IOMMU translating the FPGA's DMA (intel-iommu), on 6.12 next to the
# open NVIDIA driver: pins through IOVAs, and dma-bufs whose raw BAR
# addresses the IOMMU would drop refused with the reason.
vmtest-iommu: qemu
	@test -n "$(KVER_612)" || { echo "vmtest: no 6.12 kernel headers: run make deps" >&2; exit 1; }
	$(call debian_kmod,$(KVER_612))
	$(call vmtest_on,$(KVER_612),/boot/vmlinuz-$(KVER_612),$(CURDIR)/build/kmod-$(KVER_612),/lib/modules/$(KVER_612),open,TestIOMMU)

# The example user design (hw/rtl/example, Verilator) in the rig in place of
# the Go source, on 6.1, its clock tied to the guest's instruction-counted
# one: the driver streams its frames, the guest reaches its registers
# through the user BAR (hw/testbench/rtlguest).
vmtest-rtl: qemu
	@test -n "$(KVER_61)" || { echo "vmtest: no 6.1 kernel headers: run make deps" >&2; exit 1; }
	$(call debian_kmod,$(KVER_61))
	$(call vmtest_on,$(KVER_61),/boot/vmlinuz-$(KVER_61),$(CURDIR)/build/kmod-$(KVER_61),/lib/modules/$(KVER_61),proprietary,TestRTL)

# The same suite, and the ABI fuzzer, on the debug kernel (KASAN, lockdep,
# kmemleak, DMA-API debug, UBSAN, KFENCE), built once and cached outside the
# tree by hw/testbench/kernel/build-debug.sh. Any report in the guest fails.
# Next to the open NVIDIA driver: a proprietary module turns lockdep off.
vmtest-debug: qemu guest-c-example
	@set -e; kd=$$(hw/testbench/kernel/build-debug.sh); kver=$$(cat $$kd/include/config/kernel.release); \
	$(call kmod_for,debug,$$kd,$$kd/vmlinux); \
	GPUFPGA_QUIRKS='$(CARD_QUIRKS)' GPUFPGA_DEBUG_KERNEL=1 GPUFPGA_FUZZ_OPS=$(FUZZ_OPS) GPUFPGA_FUZZ_SEED=$(FUZZ_SEED) $(call vmtest_on,$$kver,$$kd/arch/x86/boot/bzImage,$(CURDIR)/build/kmod-debug,,open)

FUZZ_OPS ?= 100000

# GPU work runs on a machine with an NVIDIA GPU, which needs neither Go nor
# the CUDA toolkit: `make gpubin` here, copy bin/gpu/ there, and run
# bin/gpu/run there (the GPU tests, then the benchmark into results/).
# examples/acquire's processing path is tested there too (acquire.test).
GPU_TEST_PKGS := cuda gpucheck stream/cudamem resident

# gpubench records the revision it was built from (and whether tracked
# files differed from it), which Go's VCS stamping leaves out in a worktree.
GITREV   = $(shell git rev-parse HEAD 2>/dev/null)
GITDIRTY = $(shell git diff --quiet HEAD -- 2>/dev/null || echo true)

gpubin:
	@mkdir -p $(BIN)/gpu
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.revision=$(GITREV) -X main.dirty=$(GITDIRTY)" -o $(BIN)/gpu/ ./cmd/gpubench
	@for p in $(GPU_TEST_PKGS); do \
		CGO_ENABLED=0 $(GO) test -c -tags gpu -o $(BIN)/gpu/$$(basename $$p).test ./pkg/$$p/ || exit 1; \
	done
	CGO_ENABLED=0 $(GO) test -c -tags gpu -o $(BIN)/gpu/acquire.test ./examples/acquire/
	CGO_ENABLED=0 $(GO) test -c -tags gpu -o $(BIN)/gpu/cuda-resident.test ./examples/cuda-resident/
	cp hw/gpu/run pkg/gpucheck/framecheck.ptx pkg/resident/resident.ptx pkg/resident/func.ptx pkg/resident/peer.ptx examples/acquire/framestats.ptx \
		examples/cuda-resident/consumer.ptx $(BIN)/gpu/
	@# cuda.test's TestLinkExternFunction reads them from its directory.
	mkdir -p $(BIN)/gpu/testdata && cp pkg/cuda/testdata/link_*.ptx $(BIN)/gpu/testdata/

# The same on a GPU machine that has Go.
gputest: gpubin
	$(BIN)/gpu/run

# One pass of measurements on the GPU, as a new JSON file in results/
# named for date, GPU and revision.
gpubench: gpubin
	@mkdir -p results
	$(BIN)/gpu/gpubench -out results

# The GPU kernels' PTX (committed): PTX ISA 6.0 for sm_70, the lowest the
# kernels need (shfl.sync), which every driver from R384 (CUDA 9.0) on
# compiles for its GPU. clang's NVPTX back end (Debian's clang) writes the
# ISA asked for; nvcc writes its own toolkit's (9.0 for CUDA 13, needing
# R580). clang_cuda.h stands in for CUDA's headers.
# pkg/resident's consumer needs ISA 6.0 and sm_70 as well: ld.acquire and
# st.release at system scope. examples/acquire's framestats.cu is made the
# same way (nvcc -ptx -arch=sm_70 makes it as well).
PTXCC ?= clang
PTXFLAGS := -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 \
	-Xclang -target-feature -Xclang +ptx60 -fcuda-short-ptr -mllvm --nvptx-short-ptr -O3 -S
ptx:
	$(PTXCC) $(PTXFLAGS) -include pkg/gpucheck/clang_cuda.h pkg/gpucheck/framecheck.cu -o pkg/gpucheck/framecheck.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/resident.cu -o pkg/resident/resident.ptx
	$(PTXCC) $(PTXFLAGS) -include examples/acquire/clang_cuda.h examples/acquire/framestats.cu -o examples/acquire/framestats.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/func.cu -o pkg/resident/func.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/frm1.cu -o pkg/resident/frm1.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/frames_func.cu -o pkg/resident/frames_func.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/pattern_func.cu -o pkg/resident/pattern_func.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h cmd/gpubench/empty_func.cu -o cmd/gpubench/empty_func.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/peer.cu -o pkg/resident/peer.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/resident/testdata/sum.cu -o pkg/resident/testdata/sum.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/cuda/testdata/link_caller.cu -o pkg/cuda/testdata/link_caller.ptx
	$(PTXCC) $(PTXFLAGS) -include pkg/resident/clang_cuda.h pkg/cuda/testdata/link_user.cu -o pkg/cuda/testdata/link_user.ptx
	$(PTXCC) $(PTXFLAGS) -include examples/acquire/clang_cuda.h examples/acquire/framestats_func.cu -o examples/acquire/framestats_func.ptx
	mkdir -p build/include/gpufpga && cp $(UAPI_HEADERS) build/include/gpufpga/
	$(PTXCC) $(PTXFLAGS) -include examples/cuda-resident/clang_cuda.h -Ibuild/include examples/cuda-resident/consumer.cu -o examples/cuda-resident/consumer.ptx

# NVIDIA's assembler takes the PTX for each architecture from Volta to
# Hopper, with its registers and spills: ptxas 11.8 from Debian's non-free
# nvidia-cuda-toolkit, fetched with apt into build/cuda (nothing installed;
# a private apt list). pkg/gpucheck's TestPTXAssembles runs it too.
PTXAS_DEB_DIR := build/cuda
PTXAS ?= $(PTXAS_DEB_DIR)/usr/bin/ptxas
ptxcheck: $(PTXAS)
	@for a in sm_70 sm_75 sm_80 sm_86 sm_89 sm_90; do \
		for p in pkg/gpucheck/framecheck.ptx pkg/resident/resident.ptx pkg/resident/peer.ptx examples/acquire/framestats.ptx examples/cuda-resident/consumer.ptx; do \
			echo "== ptxas -arch=$$a $$p"; \
			$(PTXAS) -arch=$$a -v $$p -o /dev/null || exit 1; \
		done; \
		for p in pkg/resident/func.ptx pkg/resident/frm1.ptx pkg/resident/frames_func.ptx pkg/resident/pattern_func.ptx cmd/gpubench/empty_func.ptx pkg/resident/testdata/sum.ptx examples/acquire/framestats_func.ptx; do \
			echo "== ptxas -c -arch=$$a $$p (linked with a function, or into the consumer)"; \
			$(PTXAS) -c -arch=$$a -v $$p -o /dev/null || exit 1; \
		done; \
	done

$(PTXAS_DEB_DIR)/usr/bin/ptxas:
	mkdir -p $(PTXAS_DEB_DIR)/apt/lists/partial $(PTXAS_DEB_DIR)/apt/cache/archives/partial
	echo "deb http://deb.debian.org/debian bookworm non-free" > $(PTXAS_DEB_DIR)/apt/sources.list
	apt-get -o Dir::Etc::SourceList=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/sources.list -o Dir::Etc::SourceParts=/dev/null \
		-o Dir::State::Lists=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/lists -o Dir::Cache=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/cache update
	cd $(PTXAS_DEB_DIR) && apt-get -o Dir::Etc::SourceList=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/sources.list \
		-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/lists \
		-o Dir::Cache=$(CURDIR)/$(PTXAS_DEB_DIR)/apt/cache download nvidia-cuda-toolkit
	dpkg -x $(PTXAS_DEB_DIR)/nvidia-cuda-toolkit_*.deb $(PTXAS_DEB_DIR)

# The BPF objects of pkg/trace and their Go bindings, from vmlinux.h made
# from the BTF of the kernel the rig boots (needs clang, libbpf-dev, bpftool).
bpf:
	vm=$$(hw/testbench/kernel/vmlinux-for.sh "$(KVER)" $(CURDIR)/build) && \
	bpftool btf dump file $$vm format c > pkg/trace/bpf/vmlinux.h
	$(GO) generate ./pkg/trace

# The Go mirror of the driver's ABI (needs gcc).
# A C example, built against the uapi headers laid out as gpufpga-dev
# installs them (<gpufpga/gpufpga.h>), warnings as errors: $(1) extra
# flags, $(2) the binary, $(3) the example (examples/$(3)/$(3).c). make
# lint builds them; the guest suite runs static builds on the rig
# (kmodtest's TestCStreamExample and TestCResidentExample).
C_EXAMPLE_FLAGS := -std=c11 -O2 -Wall -Wextra -Werror
UAPI_HEADERS := kmod/gpufpga/uapi/gpufpga.h kmod/gpufpga/uapi/gpufpga_resident.h kmod/gpufpga/uapi/gpufpga_resident_cuda.cuh
c_example = mkdir -p build/include/gpufpga $(dir $(2)) && \
	cp $(UAPI_HEADERS) build/include/gpufpga/ && \
	$(CC) $(C_EXAMPLE_FLAGS) $(1) -Ibuild/include -o $(2) examples/$(3)/$(3).c

examples-c:
	$(call c_example,,build/examples/c-stream,c-stream)
	$(call c_example,,build/examples/c-resident,c-resident)
	printf '#include <gpufpga/gpufpga.h>\n#include <gpufpga/gpufpga_resident.h>\n' | \
		$(CXX) -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Ibuild/include -
	@# The device-side header, as a CUDA program includes it (clang's CUDA
	@# mode, no toolkit), and the example that uses it alone.
	$(PTXCC) $(PTXFLAGS) -Wall -Wextra -Werror -include examples/cuda-resident/clang_cuda.h -Ibuild/include \
		examples/cuda-resident/consumer.cu -o /dev/null

# cgo's objects go to a temporary directory, not pkg/p2p/_obj.
godefs:
	@set -e; obj=$$(mktemp -d); trap 'rm -rf "$$obj"' EXIT; \
	cd pkg/p2p && (echo '//go:build linux'; echo; $(GO) tool cgo -objdir "$$obj" -godefs types_linux.go | sed "s| -objdir $$obj||") | gofmt > ztypes_linux.go

# Nothing foreign in the tree: no committed ELF file (a binary, an
# object) but the BPF objects pkg/trace generates on purpose.
tree-check:
	@elf=$$(git ls-files -z | while IFS= read -r -d '' f; do \
		[ -f "$$f" ] && [ "$$(head -c4 -- "$$f" | tr -d '\0')" = $$'\177ELF' ] && echo "$$f"; \
	done | grep -v '^pkg/trace/[^/]*_bpfel\.o$$'); \
	if [ -n "$$elf" ]; then echo "lint: committed ELF files (only pkg/trace's generated BPF objects belong in the tree):"; echo "$$elf"; exit 1; fi

# amd64 and arm64 (GH200/GB200 hosts), and the guest tests' build tag.
lint: tree-check examples-c
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt needed:"; echo "$$fmt"; exit 1; fi
	@sc=$$($(GO) tool -n staticcheck) || exit 1; \
	for arch in amd64 arm64; do \
		echo "lint: GOARCH=$$arch"; \
		GOARCH=$$arch $(GO) vet ./... || exit 1; \
		GOARCH=$$arch $(GO) vet -tags vmguest ./... || exit 1; \
		GOARCH=$$arch $$sc ./... || exit 1; \
		GOARCH=$$arch CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/p2pctl || exit 1; \
	done
	@deps=$$($(GO) list -deps ./cmd/p2pctl ./cmd/gpubench ./pkg/... ./internal/... ./examples/... | grep '/hw/'); if [ -n "$$deps" ]; then echo "lint: production code or an example imports the rig:"; echo "$$deps"; exit 1; fi
	@deps=$$($(GO) list -deps -test -tags gpu ./cmd/gpubench ./examples/... | grep '/hw/'); if [ -n "$$deps" ]; then echo "lint: gpubench's or an example's tests import the rig (they run where it is not):"; echo "$$deps"; exit 1; fi
	@deps=$$($(GO) list -deps ./pkg/stream | grep -E 'purego|/pkg/cuda$$|/pkg/gpucheck$$'); if [ -n "$$deps" ]; then echo "lint: pkg/stream links CUDA (it belongs in pkg/stream/cudamem):"; echo "$$deps"; exit 1; fi
	@deps=$$($(GO) list -deps ./pkg/p2p ./pkg/stream | grep prometheus); if [ -n "$$deps" ]; then echo "lint: pkg/p2p or pkg/stream imports Prometheus (it belongs in pkg/metrics):"; echo "$$deps"; exit 1; fi

unit:
	$(GO) test -count=1 ./...

# A user's FPGA logic in the loop (hw/testbench/rtlbridge): builds
# RTL_TOP from RTL_FILES with the co-simulation harness into build/rtl
# (cached by its inputs) and prints the binary. The default is the example
# design at 256 bits. `make unit` runs the co-simulation tests (verilator
# is required there).
RTL_TOP    ?= gpufpga_example
RTL_FILES  ?= hw/rtl/example/gpufpga_example.sv
RTL_INC    ?= hw/rtl/example
RTL_PARAMS ?= DATA_WIDTH=256 PAYLOAD_BYTES=1000
rtl:
	@$(GO) run ./hw/testbench/cmd/rtl-build -top $(RTL_TOP) $(addprefix -I ,$(RTL_INC)) $(addprefix -G ,$(RTL_PARAMS)) $(RTL_FILES)

# The example free-running against a consumer that pauses at random, for
# RTL_SOAK batches of 16 frames (every frame consumed or dropped, each
# drop a gap, checked at the end).
RTL_SOAK ?= 20000
rtl-soak:
	$(GO) test -count=1 -run '^$$' -bench Soak -benchtime $(RTL_SOAK)x -timeout 0 ./hw/testbench/rtlbridge/

# Co-simulation speed: the example at 256 bits, free-running and
# synchronised, against the Go source in the same run, into results/.
rtl-bench:
	@mkdir -p results
	@set -o pipefail; $(GO) test -count=1 -v -run '^$$' -bench CoSim -benchtime 1x ./hw/testbench/rtlbridge/ | \
		tee results/$$(date -u +%Y-%m-%dT%H%MZ)-rtl-cosim-$$(git rev-parse --short=12 HEAD).txt

# dkms.conf, as DKMS on a user's machine runs it, for both kernel series.
dkms-check:
	hw/testbench/kernel/dkms-check.sh $(KVER_61) $(KVER_612)

# The Debian packages gpufpga-dkms and p2pctl, into build/deb/.
deb:
	GO=$(GO) packaging/deb/build.sh build/deb

# README.md's "On a real host" on this machine (as root): builds and
# installs both packages, checks that DKMS built the modules for every
# kernel with headers (both series at least) and that p2pctl runs, then
# purges them and checks that nothing is left. Loads no module.
deb-check:
	hw/testbench/deb/check.sh $(KVER_61) $(KVER_612)

# Every phase, timed: a fresh machine spends most of it building the debug
# kernel once (cached outside the tree afterwards).
TEST_PHASES := deps lint unit dkms-check deb-check qemu vmtest-6.1 vmtest-6.12 vmtest-swiotlb vmtest-iommu vmtest-rtl debug-kernel vmtest-debug
test-phases:
	@echo $(TEST_PHASES)
test:
	@set -e; for p in $(TEST_PHASES); do \
		s=$$(date +%s); $(MAKE) --no-print-directory $$p; \
		echo "== make $$p: $$(( $$(date +%s) - s )) s"; done

# make test (or FRESH_TARGETS) from a clean clone of HEAD in a new Debian
# 12 root holding only a new machine's image packages and Go, each phase
# timed (as root; hw/fresh-root/fresh-root.sh). Nothing of this machine's
# caches or hand-installed packages is there: a missing install step fails.
FRESH_TARGETS ?= test
fresh-root:
	hw/fresh-root/fresh-root.sh $(FRESH_TARGETS)

# The rig's QEMU alone (hw/testbench/qemu/build-qemu.sh; cached).
qemu:
	hw/testbench/qemu/build-qemu.sh

# The debug kernel alone (hw/testbench/kernel/build-debug.sh; cached).
debug-kernel:
	hw/testbench/kernel/build-debug.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

# The driver's guest CPU cost per operation against a null ioctl, on an
# instruction-counting guest (6.1); the figures go to build/icount.json.
bench-icount: qemu
	$(call debian_kmod,$(KVER_61))
	@set -o pipefail; $(call vmtest_on,$(KVER_61),/boot/vmlinuz-$(KVER_61),$(CURDIR)/build/kmod-$(KVER_61),/lib/modules/$(KVER_61),open,TestICount) > build/icount.log 2>&1 \
		|| { tail -n 40 build/icount.log; exit 1; }
	@sed -n 's/.*ICOUNT| //p' build/icount.log | tee build/icount.json
	@sed -n 's/.*IRQWORK| //p' build/icount.log | tee build/icount-irq.json

# The engine model alone, then the whole rig: driver, simulated FPGA and GPU.
demo: deps build kmod qemu
	@echo "== 1. XDMA engine model, in process"
	@$(BIN)/p2p-testbench selftest
	@echo
	@echo "== 2. The driver in a QEMU guest against the simulated FPGA and GPU (log: build/demo.log)"
	@set -o pipefail; GPUFPGA_QEMU=$$(hw/testbench/qemu/build-qemu.sh) GPUFPGA_MODULES=$(MODULES_OUT) KVER=$(KVER) GPUFPGA_KERNEL=/boot/vmlinuz-$(KVER) GPUFPGA_GUEST_KMODS=/lib/modules/$(KVER) $(GO) test -tags vmtest -count=1 -timeout 10m -v \
		-run TestDemo ./hw/testbench/vmtest/ > build/demo.log 2>&1 \
		|| { tail -n 40 build/demo.log; echo "demo failed: see build/demo.log" >&2; exit 1; }
	@sed -n 's/.*DEMO| \{0,1\}//p' build/demo.log

clean:
	rm -rf $(BIN) build
	$(GO) clean -testcache
