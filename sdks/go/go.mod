module github.com/hybox-dev/hybox/sdks/go

go 1.24

require github.com/coder/websocket v1.8.15
