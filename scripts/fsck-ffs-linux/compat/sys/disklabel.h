/* Linux compatibility glue: <sys/disklabel.h> not needed on an image */
