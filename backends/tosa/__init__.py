"""The TOSA backend: int8 partitions lowered to a TOSA 1.0 flatbuffer (the blob), for targets that take TOSA.

aot/ (build side): which calls an integer TOSA profile takes, and the graph walk into `tosa_serializer`;
runtime/ (torch-free): runs a TOSA flatbuffer in the TOSA reference model (tosa-tools, the `ethos-u` extra).
The Ethos-U backend (etbuild.backends.ethos_u) lowers its partitions with the same walk, then compiles them.
"""
