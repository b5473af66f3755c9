#!/bin/bash
# Peak RSS (KB) of `bucketload read` opening the files manifest of N objects (rank 0 of N reads
# one sample, which does not exist: the open is what is measured). Usage: rss.sh BIN N
BIN=$1; N=$2
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$(cat ${PORT_FILE:-/tmp/cb/port})
/usr/bin/time -f "%M" -o /tmp/cb/time.out $BIN read s3://bench/m$N --format files --world-size $N --rank 0 > /tmp/cb/read.out 2>&1
echo "$(basename $BIN) N=$N peak_rss_kb=$(tail -1 /tmp/cb/time.out) $(grep -o 'not found\|error' /tmp/cb/read.out | head -1)"
