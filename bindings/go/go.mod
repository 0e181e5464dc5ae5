module github.com/lctx/lctx/bindings/go

go 1.19
