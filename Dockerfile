# The Moldau broker image. Build: docker build -t moldau .
FROM python:3.11-slim

WORKDIR /opt/moldau
COPY client ./client
COPY broker ./broker
RUN pip install --no-cache-dir ./client ./broker && useradd --system --uid 1001 moldau \
    && mkdir -p /var/lib/moldau && chown moldau /var/lib/moldau

USER moldau
# 9404: /metrics, /livez and /readyz (http.listener), where Strimzi's scrape configs look.
EXPOSE 9092 9404
VOLUME ["/var/lib/moldau"]
# Listen on every interface; set advertised.listeners to the address clients reach.
ENTRYPOINT ["moldau", "broker", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
            "--override", "log.dirs=/var/lib/moldau", \
            "--override", "http.listener=http://0.0.0.0:9404"]
