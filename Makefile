# SPDX-License-Identifier: Apache-2.0
# sluice — the two commands a newcomer needs: `make demo` and `make test`.
# Everything else is a step of those two.

SHELL      := /bin/bash
GO         ?= go
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS    := -X sluice/internal/cli.version=$(VERSION) -X sluice/internal/cli.commit=$(COMMIT)
BIN        := bin/sluice
# Generated BPF bindings are committed; `check-generated` proves they match the C.
BPF_GEN    := $(wildcard internal/*/*_bpfel.go internal/*/*_bpfel.o)
# The vmtest tag only adds test files, so vet and staticcheck with it see every package the plain
# build does, and more. Only packages holding a file that builds without the tag alone (`!vmtest`)
# need a plain pass too: one pass over the tree instead of two halves lint's time on a cold cache.
NOVMTEST   := $(sort $(dir $(shell git grep -l '^//go:build.*!vmtest' -- '*.go' 2>/dev/null)))

.PHONY: all setup build generate check-generated lint test-host test-kernel-model vmtest test demo package image clean kernel-next vmtest-next vmtest-next-subset

all: build

## setup: install every package build, tests, lab and the test VM need (idempotent)
setup:
	bash scripts/setup.sh

## build: the one binary, bin/sluice
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sluice

## generate: compile bpf/*.c with clang through bpf2go
generate:
	$(GO) generate ./...

## check-generated: fail when committed BPF objects differ from a fresh build
check-generated: generate
	@echo "== make check-generated: $$(date -u +%T)"
	@git diff --exit-code --stat -- $(BPF_GEN) || { echo "BPF objects are stale: run 'make generate' and commit them" >&2; exit 1; }

## lint: go.mod/go.sum tidy, gofmt, SPDX lines, go vet and staticcheck (with the VM build tag, and
## without it where a file builds only without it)
lint:
	@echo "== make lint: $$(date -u +%T)"
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	@bash scripts/spdx.sh --check || { echo "SPDX lines missing or wrong: run scripts/spdx.sh (README, License)"; exit 1; }
	$(GO) vet -tags vmtest ./...
	$(if $(NOVMTEST),$(GO) vet $(addprefix ./,$(NOVMTEST)))
	$(GO) tool staticcheck -tags vmtest ./...
	$(if $(NOVMTEST),$(GO) tool staticcheck $(addprefix ./,$(NOVMTEST)))

## test-host: unit tests and privileged host tests (BPF_PROG_RUN, netns, XDP on veth); the
## packages that need the kube-apiserver build after the rest, the lab tests (test/e2e) alone
## at the end (scripts/test-host.sh says why)
test-host:
	@echo "== make test-host: $$(date -u +%T)"
	GO=$(GO) bash scripts/test-host.sh

## vmtest: the tests that need ESP, bonding, flower, netdevsim..., in the qemu test VM
vmtest:
	@echo "== make vmtest: $$(date -u +%T)"
	bash scripts/vmtest.sh

## kernel-next: the second test kernel (the newest Linux in trixie-backports, 7.3) and its trixie root
## with strongSwan 6, cached in /var/cache/sluice/next (docs/testing.md "The next kernel")
kernel-next:
	bash scripts/kernel-next.sh

## vmtest-next: the VM tests whose subject the newer kernel changed, on it: mirror and monitor,
## post-SA, the NIC model, flower, the gateway on the model, charon 6 with packet offload on the model.
## VMTEST_NEXT overrides the filter.
VMTEST_NEXT ?= ^(TestVM.*|TestPostSA.*|TestNicmodel.*|TestFlower.*|TestGateway.*|TestSwanTunnelsMirroredByGateway|TestSwanPacketOffloadOnModel|TestOverlayIKEPacketOffload.*)$$
vmtest-next: kernel-next
	SLUICE_VM_KERNEL=next bash scripts/vmtest.sh '$(VMTEST_NEXT)'

## vmtest-next-subset: make test's part on the next kernel, a few minutes: the tests whose subject 7.3
## changed most (XFRM_MSG_MIGRATE_STATE and per-CPU SAs in the monitor, post-SA against 7.3, charon 6
## with packet offload on the NIC model, by sluice swan and by the overlay's keying: ike; docs/testing.md
## "The next kernel" says why these). It waits for
## the root make setup builds in the background; without one it fails under CI=true, else says SKIPPED.
VMTEST_NEXT_SUBSET ?= ^(TestVM.*|TestPostSAAgainstKernel|TestSwanPacketOffloadOnModel|TestOverlayIKEPacketOffload.*OnModel)$$
vmtest-next-subset:
	@echo "== make vmtest-next-subset: $$(date -u +%T)"
	@if bash scripts/kernel-next.sh; then \
	  SLUICE_VM_KERNEL=next bash scripts/vmtest.sh '$(VMTEST_NEXT_SUBSET)'; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "vmtest-next-subset: no next kernel root (scripts/kernel-next.sh failed, above): CI needs it" >&2; exit 1; \
	else \
	  echo "vmtest-next-subset: SKIPPED: no next kernel root (scripts/kernel-next.sh failed, above; make kernel-next retries)" >&2; \
	fi

## test-kernel-model: longer random runs of the fast path against the kernel and its model (SLUICE_MODEL_ROUNDS=200)
test-kernel-model:
	SLUICE_MODEL_ROUNDS=$${SLUICE_MODEL_ROUNDS:-200} $(GO) test -count=1 -timeout 30m -v \
		-run 'TestClassifierMatchesKernelModel|TestKernelAgreesWithModelAndProgram' ./internal/fastpath

## test: everything CI runs, on a machine where nothing is installed yet
test: setup lint check-generated test-host vmtest vmtest-next-subset

## fuzz: every Go fuzz target for FUZZTIME each (default 30s), one at a time; not part of test
## (the seed corpora already run in test-host). FUZZ=word limits it: make fuzz FUZZ=FuzzParseHost
FUZZTIME ?= 30s
.PHONY: fuzz
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh $(FUZZ)

## demo: build, show what sluice sees of this kernel, then benchmark kernel vs XDP vs sluice forwarding up to each one's ceiling (bin/demo-report)
demo: build
	./$(BIN) version
	@echo
	@echo "== the same iMIX through Linux forwarding, a bare XDP redirect and sluice's fast path, 3 rounds (about 2 min) =="
	@echo "== no fixed top: the rate rises until each forwarder loses or the generator falls short, and the summary says which =="
	./$(BIN) bench compare --topology forwarder --forwarders kernel,xdp-redirect,sluice \
		--profile imix-mno-1 --rate-max auto --steps 10 --step-seconds 1 --rounds 3 --out bin/demo-report

## package: static binary, .deb and .rpm in bin/package (man pages and completions from the command tree; docs/install.md)
package:
	bash scripts/package.sh

## image: the DaemonSet's container image from the static binary, an OCI layout in bin/image (docs/fleet.md)
image:
	GO=$(GO) bash scripts/image.sh

clean:
	rm -rf bin .vmtest
