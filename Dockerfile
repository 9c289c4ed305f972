# kmirror in a container: `docker build -t kmirror .`, then
#   docker run -v $PWD/kmirror.toml:/etc/kmirror/kmirror.toml:ro \
#              -v $PWD/plugins.d:/etc/kmirror/plugins.d:ro -v kmirror-cache:/var/cache/kmirror kmirror
# The plugin directory and the compile cache are volumes; it runs as an unprivileged user.

# ---- build: the kmirror binary and the reference plugins
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add wasm32-unknown-unknown wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --release -p kmirror && cargo xtask plugins \
    && rm -f target/plugins/test_*.wasm target/plugins/wasip2/test_*.wasm

# ---- run
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/cache/kmirror kmirror \
    && mkdir -p /etc/kmirror/plugins.d /var/cache/kmirror \
    && chown kmirror /var/cache/kmirror && chmod 700 /var/cache/kmirror
COPY --from=build /src/target/release/kmirror /usr/local/bin/kmirror
COPY --from=build /src/target/plugins/ /usr/share/kmirror/plugins/
RUN mkdir -p /usr/share/kmirror/precompiled && chown 10001 /usr/share/kmirror/precompiled \
    && chmod 700 /usr/share/kmirror/precompiled
# The cache is a directory kmirror creates (0700, its own) in the volume, so it also works on
# a volume whose root is not kmirror's to use, such as a Kubernetes emptyDir.
ENV KMIRROR_CACHE_DIR=/var/cache/kmirror/components KMIRROR_LOG=info
VOLUME ["/etc/kmirror/plugins.d", "/var/cache/kmirror"]
USER 10001
# The reference plugins compiled ahead of time into a cache of the image (read-only at run
# time, also under readOnlyRootFilesystem): a start or a reload loads them in milliseconds.
# Plugins of your own: `kmirror plugin compile` them the same way in an image built FROM this.
RUN kmirror --cache-dir /usr/share/kmirror/precompiled plugin compile \
    /usr/share/kmirror/plugins/*.wasm /usr/share/kmirror/plugins/wasip2/*.wasm
ENV KMIRROR_PRECOMPILED_DIR=/usr/share/kmirror/precompiled
EXPOSE 9644
ENTRYPOINT ["/usr/local/bin/kmirror"]
CMD ["run", "--config", "/etc/kmirror/kmirror.toml"]
