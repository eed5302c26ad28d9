#!/bin/sh
set -eu
echo "migrating ${DATABASE_URL%%@*}@…"
