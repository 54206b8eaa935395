# LessonSync's user-code image: the wheel with the extras EXTRAS, without the simulator. The default, postgres,s3,k8s:
# the instance in PostgreSQL (the image writes that instance config, so EXTRAS keeps postgres), the lake in S3 and the
# Kubernetes run launcher the Helm chart's run pods load; `--build-arg EXTRAS=postgres,s3,ui` for an image that runs
# the webserver instead. Its command is the code server (the Helm chart's user deployment replaces it with `dagster
# api grpc`, so it is a CMD, not an ENTRYPOINT). Installed by deploy/install.sh, the script the wheel-install tests
# run. Not built here (no registry is reachable to pull the base image): docs/deploy.md, "The image".
FROM python:3.11-slim

ARG EXTRAS=postgres,s3,k8s

ENV DAGSTER_HOME=/opt/dagster/home \
    LESSONSYNC_DATA_DIR=/data \
    PATH=/opt/lessonsync/venv/bin:$PATH

COPY pyproject.toml setup.py README.md /src/
COPY pipeline /src/pipeline
COPY dbt_like_sql /src/dbt_like_sql
COPY deploy/install.sh deploy/build_wheel.sh /src/deploy/
RUN pip install --no-cache-dir uv \
    && PYTHON=/usr/local/bin/python3.11 sh /src/deploy/install.sh /src /opt/lessonsync/venv "$EXTRAS" \
    && rm -rf /src /root/.cache

WORKDIR /opt/lessonsync
EXPOSE 3030
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "3030", "-m", "pipeline.definitions"]
