package main

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// topology is the machine's GPUs and how they reach each other: every
// result file carries it, so that a peer figure says which link it
// crossed.
type topology struct {
	GPUs []gpuInfo `json:"gpus"`
	// Peers is cuDeviceCanAccessPeer for GPU 0 and GPU 1, both ways,
	// where there are two.
	Peers *peerAccess `json:"peer_access,omitempty"`
	// TopoM is `nvidia-smi topo -m`, as it printed it.
	TopoM      string `json:"nvidia_smi_topo_m,omitempty"`
	TopoMError string `json:"nvidia_smi_topo_m_error,omitempty"`
	Error      string `json:"error,omitempty"`
}

type gpuInfo struct {
	Ordinal int    `json:"ordinal"`
	Name    string `json:"name"`
	BusID   string `json:"pci_bus_id"`
	Error   string `json:"error,omitempty"`
}

type peerAccess struct {
	GPU0ToGPU1 bool `json:"gpu0_to_gpu1"`
	GPU1ToGPU0 bool `json:"gpu1_to_gpu0"`
}

// describeTopology reads the GPUs without taking their contexts, and what
// nvidia-smi says of their links; what fails is recorded, not returned.
func describeTopology(d *cuda.Driver) topology {
	var t topology
	t.TopoM, t.TopoMError = nvidiaSMITopo()
	n, err := d.DeviceCount()
	if err != nil {
		t.Error = err.Error()
		return t
	}
	devs := make([]*cuda.Device, n)
	for i := range n {
		info := gpuInfo{Ordinal: i}
		g, err := d.DeviceInfo(i)
		if err == nil {
			devs[i] = g
			if info.Name, err = g.Name(); err == nil {
				info.BusID, err = g.PCIBusID()
			}
		}
		if err != nil {
			info.Error = err.Error()
		}
		t.GPUs = append(t.GPUs, info)
	}
	if n >= 2 && devs[0] != nil && devs[1] != nil {
		a, err01 := devs[0].CanAccessPeer(devs[1])
		b, err10 := devs[1].CanAccessPeer(devs[0])
		if err01 == nil && err10 == nil {
			t.Peers = &peerAccess{GPU0ToGPU1: a, GPU1ToGPU0: b}
		} else if t.Error == "" {
			t.Error = "cuDeviceCanAccessPeer: " + firstErr(err01, err10).Error()
		}
	}
	return t
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// nvidiaSMITopo runs `nvidia-smi topo -m`: its text, or why there is none.
func nvidiaSMITopo() (string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "topo", "-m").Output()
	if err != nil {
		return strings.TrimSpace(string(out)), "nvidia-smi topo -m: " + err.Error()
	}
	return strings.TrimRight(string(out), "\n"), ""
}
