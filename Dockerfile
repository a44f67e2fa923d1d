# syntax=docker/dockerfile:1
# The hub controller image: ghcr.io/flux-framework/flux-hub (see deploy/).
#   docker build -t ghcr.io/flux-framework/flux-hub:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Cargo.lock is checked in; --locked refuses to build if it is stale. The cache mounts
# keep the registry and target/ between builds (BuildKit); the binary is copied out of
# the cached target/ so the next stage can take it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release -p flux-hub --locked \
    && install -D -m 0755 target/release/flux-hub /out/flux-hub

# glibc + libgcc (all the binary links: TLS is rustls/ring) and a nonroot user, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/flux-hub /usr/local/bin/flux-hub
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/flux-hub"]
CMD ["run"]
