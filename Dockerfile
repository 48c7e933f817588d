FROM python:3.11-slim
WORKDIR /app
# uv, pinned with its hashes, installs the node from the lock CI last passed.
COPY scripts/uv.txt scripts/uv.txt
RUN pip install --no-cache-dir --require-hashes -r scripts/uv.txt
COPY pyproject.toml uv.lock README.md ./
COPY dynamiq ./dynamiq
COPY config ./config
RUN uv sync --locked --no-editable --no-cache --extra redis --extra cli \
    && useradd --system dynamiq && mkdir /data && chown dynamiq /data
USER dynamiq
ENV PATH=/app/.venv/bin:$PATH DYNAMIQ_STORAGE_PATH=/data DYNAMIQ_CORE_HTTPADDRESS=0.0.0.0
VOLUME /data
# Bound to 0.0.0.0, the node needs keys: give the administrator's key in
# DYNAMIQ_AUTH_ADMINKEY (`dynamiq keys secret` makes one), or set
# DYNAMIQ_AUTH_ENABLED=false on a network you trust.
# Gossip uses UDP and, for large packets, TCP on core.port. In a cluster set
# DYNAMIQ_CLUSTER_ADDRESS to the address the other nodes reach this one at.
EXPOSE 8081 7946/udp 7946/tcp
ENTRYPOINT ["dynamiq", "serve", "-c", "config/dynamiq.gcfg"]
