package transport

import (
	"strconv"
	"strings"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key, as the cluster
// specification defines it: CRC16 (XMODEM) of its non-empty hash tag, or
// of the whole key, modulo Slots.
func Slot(key string) int64 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int64(crc) % Slots
}

// SessionKey returns a key, never written, whose slot lies in [from, to]:
// where an owner's presence checks its subscription on the Cluster master
// that serves those slots (core's presence legs).
func SessionKey(from, to int64) string {
	for n := 0; ; n++ {
		key := "fairlock:session:{" + strconv.Itoa(n) + "}"
		if s := Slot(key); s >= from && s <= to {
			return key
		}
	}
}
