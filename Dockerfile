# One image for every kubecdi program: cdi-controller, cdi-importer, cdi-uploadserver, cdi-uploadproxy.
# Pods name the program in their command. The install steps live in deploy/image/install.sh so the test
# suite can run exactly them on a Debian machine (there is no container engine to build this in CI).
FROM debian:bookworm-slim
COPY . /src
RUN /src/deploy/image/install.sh /src /opt/kubecdi && rm -rf /src
USER 1001
ENV PATH=/opt/kubecdi/bin:$PATH
