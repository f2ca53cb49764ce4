# ledgerfs in a container: a static binary on an empty image.
#
#   docker build -t ledgerfs .
#   docker run -d --name ledgerfs --device /dev/fuse --cap-add SYS_ADMIN \
#     -v /srv/ledgerfs:/data \
#     --mount type=bind,source=/mnt/ledgerfs,target=/mnt/ledgerfs,bind-propagation=rshared \
#     ledgerfs
#
# The mount is made inside the container at /mnt/ledgerfs; with the bind
# mount's rshared propagation (and /mnt/ledgerfs on a shared mount on the
# host) it shows on the host too. docker stop sends SIGTERM: the server
# commits what is pending and unmounts.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /ledgerfs ./cmd/ledgerfs

FROM scratch
COPY --from=build /ledgerfs /ledgerfs
VOLUME /data
ENTRYPOINT ["/ledgerfs"]
CMD ["mount", "/data", "/mnt/ledgerfs"]
