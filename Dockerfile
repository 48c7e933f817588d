FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY dynamiq ./dynamiq
COPY config ./config
RUN pip install --no-cache-dir . && useradd --system dynamiq && mkdir /data && chown dynamiq /data
USER dynamiq
ENV DYNAMIQ_STORAGE_PATH=/data DYNAMIQ_CORE_HTTPADDRESS=0.0.0.0
VOLUME /data
EXPOSE 8081 7946/udp
ENTRYPOINT ["dynamiq", "serve", "-c", "config/dynamiq.gcfg"]
