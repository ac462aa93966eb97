/*
** The verbs of the line protocol between a process's checkpoint library (ckpt.c) and its
** node's sub-coordinator (docs/coordinator.md): each line is a verb, then a space and its
** `key=value` fields, or the line's end. The one definition of the protocol is
** crates/cairn-launch/src/proto.rs (`Verb`); a test there checks every name here against it:
** CAIRN_V_<NAME> is the verb `Verb::<Name>` spells. ckpt.c writes and reads verbs only
** through these names.
*/
#ifndef CAIRN_CKPT_PROTO_H
#define CAIRN_CKPT_PROTO_H

/* A process and its sub-coordinator. */
#define CAIRN_V_HELLO "HELLO"
#define CAIRN_V_WELCOME "WELCOME"
#define CAIRN_V_DENIED "DENIED"
#define CAIRN_V_SUSPEND "SUSPEND"
#define CAIRN_V_SUSPENDED "SUSPENDED"
#define CAIRN_V_WRITE "WRITE"
#define CAIRN_V_WRITTEN "WRITTEN"
#define CAIRN_V_FAILED "FAILED"
#define CAIRN_V_RESUME "RESUME"
#define CAIRN_V_RESUMED "RESUMED"
#define CAIRN_V_CHECKPOINT "CHECKPOINT"
#define CAIRN_V_RUN "RUN"

/* A restored process finding the other ends of its connections to other hosts. */
#define CAIRN_V_MEET "MEET"
#define CAIRN_V_LISTEN "LISTEN"
#define CAIRN_V_SEEK "SEEK"
#define CAIRN_V_PEER "PEER"
#define CAIRN_V_NO_PEER "NONE"

#endif
