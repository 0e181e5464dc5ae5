module github.com/lctx/lctx/examples/go

go 1.19

require github.com/lctx/lctx/bindings/go v0.0.0

replace github.com/lctx/lctx/bindings/go => ../../bindings/go
