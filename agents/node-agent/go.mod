module nvkr.dev/node-agent

go 1.24
