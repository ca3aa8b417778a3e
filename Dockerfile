# gojob container image: a static binary on distroless, run as non-root.
#
#   docker build --build-arg VERSION=v0.1.0 -t gojob:v0.1.0 .      (or: make docker)
#   docker run --rm gojob:v0.1.0 work -r redis://redis:6379/0 -q default --exec 'HardJob=/app/hard-job'
#
# Multi-platform: docker buildx build --platform linux/amd64,linux/arm64 .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/gojob/gojob/internal/buildinfo.version=${VERSION}" \
      -o /out/gojob ./cmd/gojob

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gojob /usr/local/bin/gojob
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/gojob"]
CMD ["--help"]
