"""What a fencing command promises, checked from outside: once PREEMPT AND ABORT (SPC-4
5.13.11.2.4) or a LOGICAL UNIT RESET (SAM-5 5.6) is answered, no write of a nexus it aborted can
land any more, on any gateway (fence_scsi and cluster managers rely on it).

The LUN's fault injection makes writes to its first blocks start `delay` seconds late and leaves
reads alone. The victim's write is sent and reaches the store, where it waits; the fencing command
is sent; the moment it is answered those blocks are read, and read again once the write must have
landed. The two reads must agree: a target that answers before the aborted write has left the
store shows the old data first and the victim's data after. The second read must hold the
victim's data (the write was in the store, so it lands): that keeps the check from passing because
the write never raced the fence.
"""
import os
import struct
import time

from .iscsi_client import sense_key_asc

BLOCKS = 8
WRITE_10 = struct.pack(">BBIBHB", 0x2A, 0, 0, 0, BLOCKS, 0)


KEY_A, KEY_B = struct.pack(">Q", 0xA1), struct.pack(">Q", 0xB1)


def prout(test, ini, sa, params):
    """PERSISTENT RESERVE OUT, type WRITE EXCLUSIVE, that must answer GOOD. One that ends with a
    unit attention (an ALUA state change reported meanwhile, say) was not run (SAM-5 5.14) and is
    sent again, as an initiator does."""
    for _ in range(3):
        status, _, sense = ini._command(0, bytes([0x5F, sa, 0x01, 0, 0, 0, 0, 0, 24, 0]),
                                        data=params)
        if status != 2 or sense_key_asc(sense)[0] != 0x6:
            break
    test.assertEqual((status, sense), (0, b""))


def victim_reserves(test, victim, preemptor):
    """The victim registers KEY_A and holds a WRITE EXCLUSIVE reservation; the preemptor registers
    KEY_B. PREEMPT (AND ABORT) with KEY_B + KEY_A then fences the victim."""
    prout(test, victim, 0x00, bytes(8) + KEY_A + bytes(8))     # REGISTER
    prout(test, victim, 0x01, KEY_A + bytes(16))               # RESERVE
    prout(test, preemptor, 0x00, bytes(8) + KEY_B + bytes(8))  # REGISTER


def delayed_writes(delay):
    """The LUN's fault spec (state JSON) that delays writes to the blocks above by `delay` s."""
    return {"delayMs": int(delay * 1000), "ops": ["write"], "offset": 0, "length": BLOCKS * 512}


def read_blocks(test, reader):
    """The blocks, read past unit attentions (a LOGICAL UNIT RESET raises one for every nexus)."""
    for _ in range(3):
        status, data, sense = reader.read(0, 0, BLOCKS)
        if status != 2 or sense_key_asc(sense)[0] != 0x6:
            break
    test.assertEqual(status, 0, sense.hex())
    return data


def check_no_write_lands_after(test, victim, reader, fence, delay, what):
    """`victim` (an iscsi_client.Initiator) writes LUN 0's first blocks, `fence()` sends the
    fencing command and asserts its answer, `reader` reads the blocks (its reads must not
    conflict)."""
    data = os.urandom(BLOCKS * 512)
    test.assertNotEqual(read_blocks(test, reader), data)
    sent = time.monotonic()
    victim.send_command(0, WRITE_10, data=data)
    time.sleep(min(0.3, delay / 4))  # received and in the store, where it waits `delay`
    fence()
    answered = time.monotonic() - sent
    first = read_blocks(test, reader)
    time.sleep(max(0.0, sent + delay + 1.0 - time.monotonic()))
    final = read_blocks(test, reader)
    test.assertTrue(final == data, f"{what}: the victim's write never landed; it did not race the "
                    "fence, so nothing was checked")
    test.assertTrue(first == final, f"{what}: answered {answered:.2f} s after the victim's write "
                    f"was sent, before that write left the store (it lands {delay} s after)")
    return answered
