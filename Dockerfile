# kubecdi's images, one target per program, as CDI ships one image per program: the controller's IMPORTER_IMAGE
# and UPLOADSERVER_IMAGE name the worker images, whose pods set no command (CDI's pod shapes).
#   docker build --target importer     -t quay.io/kubecdi/cdi-importer .
#   docker build --target uploadserver -t quay.io/kubecdi/cdi-uploadserver .
#   docker build --target kubecdi      -t quay.io/kubecdi/kubecdi .      (controller, proxy, cdi: by command)
# The install steps live in deploy/image/install.sh so the test suite can run exactly them on a Debian machine
# (there is no container engine to build this in CI).
FROM debian:bookworm-slim AS kubecdi
COPY . /src
RUN /src/deploy/image/install.sh /src /opt/kubecdi && rm -rf /src
USER 1001
ENV PATH=/opt/kubecdi/bin:$PATH

FROM kubecdi AS importer
ENTRYPOINT ["cdi-importer"]

FROM kubecdi AS uploadserver
ENTRYPOINT ["cdi-uploadserver"]
