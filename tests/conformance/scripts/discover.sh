#!/bin/sh
# Horovod elastic host discovery for tf2_elastic.py: the hosts that may run workers, with slots.
echo localhost:4
