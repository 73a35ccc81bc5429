# Developer shortcuts. CI runs .ci/run, which calls the same commands.
.PHONY: build generate test lint

build:
	CGO_ENABLED=0 go build -trimpath -o bin/airlock ./cmd/airlock

generate:
	go tool -modfile=tools/go.mod buf generate

lint:
	go tool -modfile=tools/go.mod buf lint
	go vet ./...

test:
	./scripts/test
