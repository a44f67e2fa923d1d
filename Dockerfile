# syntax=docker/dockerfile:1
# The controller image: ghcr.io/flux-framework/flux-hub. It ships both binaries:
#   /usr/local/bin/flux-hub    the hub controller and CLI (the default entrypoint; deploy/)
#   /usr/local/bin/flux-spoke  the spoke controller of burst clusters (deploy/spoke/ runs
#                              it with `command: ["/usr/local/bin/flux-spoke"]`)
#   docker build -t ghcr.io/flux-framework/flux-hub:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Cargo.lock is checked in; --locked refuses to build if it is stale. The cache mounts
# keep the registry and target/ between builds (BuildKit); the binaries are copied out of
# the cached target/ so the next stage can take them, without the debug information the
# release profile keeps for profiling (symbols stay, for backtraces).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release -p flux-hub -p flux-spoke --locked \
    && install -D -m 0755 target/release/flux-hub /out/flux-hub \
    && install -D -m 0755 target/release/flux-spoke /out/flux-spoke \
    && objcopy --strip-debug /out/flux-hub \
    && objcopy --strip-debug /out/flux-spoke

# glibc + libgcc (all the binaries link: TLS is rustls/ring) and a nonroot user, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/flux-hub /usr/local/bin/flux-hub
COPY --from=build /out/flux-spoke /usr/local/bin/flux-spoke
USER 65532:65532
# 8080: the hub's metrics and probes; 8443: the hub's federation gRPC; 8081: the spoke's
# metrics and probes.
EXPOSE 8080 8443 8081
ENTRYPOINT ["/usr/local/bin/flux-hub"]
CMD ["run"]
