/* Linux compat stub: not needed by fsck_ffs on an image (kernel-only content) */
