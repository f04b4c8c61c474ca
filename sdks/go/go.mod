module github.com/hybox-dev/hybox/sdks/go

go 1.24
