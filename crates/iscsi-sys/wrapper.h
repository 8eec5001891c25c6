/* The C API farflash uses: libiscsi's context, login and asynchronous
 * SCSI task calls (iscsi.h) and its SCSI task and sense structures
 * (scsi-lowlevel.h, which iscsi.h does not include itself). */
#include <stdint.h>
#include <stddef.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
